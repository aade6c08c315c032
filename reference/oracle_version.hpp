#pragma once
// The fp64 oracle's own version (docs/DESIGN.md §9), apart from the tool's: it names the bits the oracle
// computes. Bump it when a change to the oracle moves any output bit on purpose, then regenerate the
// committed fixtures (docs/fixtures.md); the fixtures' byte-identity test fails until they are.
namespace gdnv::ref {

inline constexpr const char* kOracleVersion = "0.2.0";

}  // namespace gdnv::ref
