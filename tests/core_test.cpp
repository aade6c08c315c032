// White-box tests of core/: dtype conversions, tensors, the counter-based PRNG, SHA-256.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include <gtest/gtest.h>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "core/rng.hpp"
#include "core/scratch_file.hpp"
#include "core/sha256.hpp"
#include "core/tensor.hpp"
#include "core/text.hpp"

namespace gdnv {
namespace {

// --dtype and the fixtures' metadata spell the storage dtypes one way, the safetensors header another.
TEST(DTypeOption, StorageDtypesRoundTripThroughTheirOptionNames) {
  for (DType t : {DType::F64, DType::F32, DType::BF16}) EXPECT_EQ(parse_dtype_option(dtype_option_name(t)), t);
  EXPECT_EQ(dtype_option_name(DType::BF16), "bf16");
  EXPECT_FALSE(find_dtype_option("F32").has_value()) << "the safetensors name is no option name";
  EXPECT_THROW((void)dtype_option_name(DType::I64), Error);
}

TEST(DTypeOption, UnknownOptionNamesTheChoices) {
  try {
    (void)parse_dtype_option("fp16");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "--dtype 'fp16' is not supported: use bf16, fp32 or fp64");
  }
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to the even mantissa (1).
  EXPECT_EQ(float_to_bf16(1.0f + 0x1.0p-8f), 0x3f80);
  // 1 + 3*2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up to the even one.
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1.0p-8f), 0x3f82);
  EXPECT_EQ(float_to_bf16(1.0f + 0x1.0p-8f + 0x1.0p-20f), 0x3f81);  // just above the tie: up
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // overflows to inf under RNE
}

TEST(Bf16, PreservesNaN) {
  const float nan_low_payload = bits_float(0x7f800001u);  // payload only in the bits bf16 drops
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(nan_low_payload))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(-std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Fp16, RoundsToNearestEvenAcrossRanges) {
  EXPECT_EQ(float_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16(65519.0f), 0x7bff);           // below the midpoint to 65536
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);           // midpoint: ties to even = inf
  EXPECT_EQ(float_to_fp16(0x1.0p-24f), 0x0001);         // smallest subnormal
  EXPECT_EQ(float_to_fp16(0x1.0p-25f), 0x0000);         // half of it: ties to even = 0
  EXPECT_EQ(float_to_fp16(3 * 0x1.0p-25f), 0x0002);     // 1.5 ulp: ties to even = 2
  EXPECT_EQ(float_to_fp16(0x1.0p-14f), 0x0400);         // smallest normal
  EXPECT_EQ(float_to_fp16(1.0f + 0x1.0p-11f), 0x3c00);  // tie between 1 and 1+2^-10: even
  EXPECT_EQ(float_to_fp16(-2.0f), 0xc000);
  EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Fp16, EveryFiniteValueRoundTrips) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    if ((bits & 0x7c00) == 0x7c00 && (bits & 0x3ff)) continue;  // NaN: payload may be quieted
    ASSERT_EQ(float_to_fp16(fp16_to_float(bits)), bits) << "fp16 bits " << h;
  }
}

TEST(Bf16, EveryNonNaNValueRoundTrips) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    if ((bits & 0x7f80) == 0x7f80 && (bits & 0x7f)) continue;
    ASSERT_EQ(float_to_bf16(bf16_to_float(bits)), bits) << "bf16 bits " << h;
  }
}

TEST(Tensor, SetRoundsToStorageDtype) {
  Tensor t(DType::BF16, {3});
  t.set(0, 1.0 + 0x1.0p-8);
  t.set(1, 3.0);
  EXPECT_EQ(t.get(0), 1.0);
  EXPECT_EQ(t.get(1), 3.0);
  EXPECT_EQ(t.to(DType::F64).get(1), 3.0);
}

// The plain constructor zero-fills even memory a freed tensor left dirty; the uninitialized one only sizes.
TEST(Tensor, PlainConstructorZeroFillsAndUninitializedOnlySizes) {
  for (int round = 0; round < 3; ++round) {
    Tensor dirty = Tensor::uninitialized(DType::F64, {64, 1024});
    EXPECT_EQ(dirty.shape(), (Shape{64, 1024}));
    EXPECT_EQ(dirty.nbytes(), 64u * 1024u * 8u);
    std::fill_n(dirty.bytes(), dirty.nbytes(), std::uint8_t{0xff});
    dirty = Tensor();
    const Tensor zeros(DType::F64, {64, 1024});
    EXPECT_TRUE(std::all_of(zeros.bytes(), zeros.bytes() + zeros.nbytes(), [](std::uint8_t b) { return b == 0; }));
  }
  EXPECT_THROW(Tensor::uninitialized(DType::F64, {2, -1}), Error);
}

// On a tensor large enough to be split between threads: the first non-finite element wins, wherever
// the other lies.
TEST(Tensor, FirstNonFiniteIsTheLowestIndexOnAnySplit) {
  Tensor t(DType::F64, {3, 1 << 20});
  EXPECT_EQ(first_non_finite(t), t.numel());
  t.set(t.numel() - 1, std::numeric_limits<double>::infinity());
  EXPECT_EQ(first_non_finite(t), t.numel() - 1);
  t.set(12345, std::nan(""));
  EXPECT_EQ(first_non_finite(t), 12345);
  EXPECT_EQ(first_non_finite(Tensor(DType::F64, {0})), 0);
}

TEST(Tensor, RejectsWrongByteCountAndBadReshape) {
  EXPECT_THROW(Tensor(DType::F32, {2, 2}, std::vector<std::uint8_t>(15)), Error);
  EXPECT_THROW(Tensor(DType::F32, {2, 2}).reshaped({3}), Error);
  EXPECT_THROW(Tensor(DType::F32, {2}).data<double>(), Error);
}

// A copy owns its bytes: writing one leaves the other; assignment replaces them whole, and a move
// hands them over.
TEST(Tensor, CopiesOwnTheirBytes) {
  const Tensor a = Tensor::from(std::vector<double>{1, 2, 3}, {3});
  Tensor b = a;
  b.set(1, 5.0);
  EXPECT_EQ(a.get(1), 2.0);
  EXPECT_EQ(b.get(1), 5.0);
  b = a;
  EXPECT_TRUE(b.bitwise_equal(a));
  EXPECT_NE(b.bytes(), a.bytes());
  const std::uint8_t* storage = b.bytes();
  const Tensor c = std::move(b);
  EXPECT_EQ(c.bytes(), storage);
  EXPECT_TRUE(c.bitwise_equal(a));
}

TEST(Tensor, BitwiseEqualSeesSignedZero) {
  const Tensor a = Tensor::from(std::vector<double>{0.0}, {1});
  const Tensor b = Tensor::from(std::vector<double>{-0.0}, {1});
  EXPECT_EQ(a.get(0), b.get(0));
  EXPECT_FALSE(a.bitwise_equal(b));
}

TEST(Rng, DetLogMatchesLibmToTwoUlp) {
  const Rng rng(7, "det_log");
  for (std::uint64_t i = 0; i < 20000; ++i) {
    const double x = std::ldexp(0.5 + rng.uniform(i), static_cast<int>(i % 80) - 40);
    const double ref = std::log(x);
    ASSERT_LE(std::abs(det_log(x) - ref), 4e-16 * std::max(1.0, std::abs(ref))) << "x=" << x;
  }
}

TEST(Rng, SameCountersSameBitsDifferentStreamsDiffer) {
  const Rng a(42, "in_proj.weight"), b(42, "in_proj.weight"), c(42, "out_proj.weight");
  int same_as_c = 0;
  for (std::uint64_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(a.normal(i), b.normal(i));
    same_as_c += a.normal(i) == c.normal(i);
  }
  EXPECT_EQ(same_as_c, 0);
}

TEST(Rng, StreamIsPinnedAcrossMachines) {
  // Pinned on purpose: committed fixtures are generated from this stream, so a change to the
  // generator must be deliberate (and regenerate fixtures), never an accident of a library update.
  const Rng rng(1234, "pin");
  EXPECT_EQ(hash64(1, 2, 3), 0xe83814e2ef5acb27ull);
  EXPECT_EQ(rng.uniform(0), 0x1.797690382c984p-3);
  EXPECT_EQ(rng.normal(5), -0x1.9cf3f0e6e2633p+0);
}

TEST(Rng, NormalHasUnitMomentsAndUniformStaysInRange) {
  const Rng rng(99, "moments");
  const int n = 200000;
  double sum = 0, sum2 = 0, sum4 = 0;
  for (int i = 0; i < n; ++i) {
    const double z = rng.normal(i);
    sum += z;
    sum2 += z * z;
    sum4 += z * z * z * z;
    const double u = rng.uniform(i);
    ASSERT_TRUE(u >= 0.0 && u < 1.0);
  }
  // Standard errors at n=2e5: mean 0.0022, variance 0.0032, fourth moment 0.022; bounds are ~5 sigma.
  EXPECT_NEAR(sum / n, 0.0, 0.011);
  EXPECT_NEAR(sum2 / n, 1.0, 0.016);
  EXPECT_NEAR(sum4 / n, 3.0, 0.11);
}

std::string sha256_of(const std::string& s) {
  return sha256_hex(reinterpret_cast<const std::uint8_t*>(s.data()), s.size());
}

// FIPS 180-2 appendix B: one block, the empty message, the 448-bit two-block message, one million 'a'.
// A file beyond kScratchInMemoryBytes, memory below: the same doubles back at every offset.
TEST(ScratchFile, ReadsBackWhatWasWrittenAtEachOffset) {
  for (const std::int64_t capacity : {std::int64_t{7}, kScratchInMemoryBytes / 8 + 1}) {
    ScratchFile f(capacity);
    const double a[3] = {1.5, -0.0, 3e300}, b[2] = {7, 8}, c[2] = {-1, -2};
    f.write(0, a, 3);
    f.write(3, c, 2);
    f.write(5, b, 2);
    double back[7] = {};
    f.read(0, back, 7);
    EXPECT_EQ(std::signbit(back[1]), true);
    EXPECT_EQ(back[0], 1.5);
    EXPECT_EQ(back[2], 3e300);
    EXPECT_EQ(back[4], -2.0);
    EXPECT_EQ(back[6], 8.0);
  }
}

TEST(ScratchFile, ReadingPastTheEndSaysSo) {
  ScratchFile f(kScratchInMemoryBytes / 8 + 1);
  const double a[2] = {1, 2};
  f.write(0, a, 2);
  double back[3];
  try {
    f.read(0, back, 3);
    FAIL() << "read past the end";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(": read past its end at byte 16"), std::string::npos) << e.what();
  }
}

TEST(ScratchFile, AnUnusableTmpdirNamesTheFix) {
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  ::setenv("TMPDIR", "/nonexistent-gdnv", 1);
  try {
    ScratchFile f(kScratchInMemoryBytes / 8 + 1);
    FAIL() << "created a scratch file in a missing directory";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "scratch file in /nonexistent-gdnv: creating it failed (No such file or directory): point TMPDIR at a "
              "writable directory with room for it");
  }
  if (old) ::setenv("TMPDIR", saved.c_str(), 1);
  else ::unsetenv("TMPDIR");
}

TEST(Sha256, MatchesFipsVectors) {
  EXPECT_EQ(sha256_of("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_of(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_of(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Lengths around the padding boundaries (55/56 bytes: the length still fits in the last block or
// not; 64, 120: whole blocks), against Python's hashlib on bytes (7i + 3) mod 256.
TEST(Sha256, PaddingBoundaries) {
  const std::vector<std::pair<std::size_t, std::string>> want = {
      {55, "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b"},
      {56, "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27"},
      {63, "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055"},
      {64, "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241"},
      {65, "aacca6ff74fdbb296d165a45cecfa04e5127bc008770fbbdd48006f2d2fae95e"},
      {119, "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e"},
      {120, "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5"}};
  for (const auto& [n, digest] : want) {
    std::vector<std::uint8_t> bytes(n);
    for (std::size_t i = 0; i < n; ++i) bytes[i] = static_cast<std::uint8_t>((i * 7 + 3) % 256);
    EXPECT_EQ(sha256_hex(bytes), digest) << n << " bytes";
  }
}

TEST(Printable, KeepsPrintableTextAndValidUtf8) {
  EXPECT_EQ(printable("grad::A_log [3, 4] = 1e-06"), "grad::A_log [3, 4] = 1e-06");
  EXPECT_EQ(printable("\u03c0-\u4e2d-\U0001f600"), "\u03c0-\u4e2d-\U0001f600");  // 2, 3 and 4 bytes
}

TEST(Printable, EscapesControlAndInvalidBytes) {
  EXPECT_EQ(printable(std::string("a\xb9"
                                  "b")),
            "a\\xb9b");  // stray continuation byte
  EXPECT_EQ(printable(std::string("line\nnext\x1b[31m")), "line\\x0anext\\x1b[31m");
  EXPECT_EQ(printable(std::string("\xc3")), "\\xc3");                    // truncated 2-byte sequence
  EXPECT_EQ(printable(std::string("\xc0\xaf")), "\\xc0\\xaf");           // overlong '/'
  EXPECT_EQ(printable(std::string("\xed\xa0\x80")), "\\xed\\xa0\\x80");  // UTF-16 surrogate
  EXPECT_EQ(printable(std::string("\x7f", 1) + std::string(1, '\0')), "\\x7f\\x00");
  EXPECT_EQ(printable("back\\slash"), "back\\\\slash");  // unambiguous: a real backslash doubles
}

}  // namespace
}  // namespace gdnv
