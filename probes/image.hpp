#pragma once
// Probe images: the layer's outputs and gradients dumped by one build ("image") on deterministic
// inputs, so two builds, or CP=1 and each CP mode, can be compared tensor by tensor. On disk, DIR:
//   inputs.safetensors          full natural-order hidden_states, cu_seqlens (THD), every parameter,
//                               grad_output, the layer config in metadata (`gdn-verify reference
//                               --in DIR/inputs.safetensors` recomputes the oracle)
//   <mode>.rank<r>.safetensors  rank r's zigzag shard of out and grad_hidden, and the CP-summed
//                               grad::<param> (every rank's copy); mode is cp1, headwise, chunkwise or
//                               all_gather; metadata names the run that wrote it. With
//                               --stages also every named stage as rank r computed it (F64 [rows,
//                               cols]) with its rows::<stage> and cols::<stage> (I64) placing it
//                               in the stage's natural-order tensor (docs/DESIGN.md §8)
//   meta.json                   image label, versions (gdn-verify, git commit, compiler, Eigen, MPI,
//                               CUDA, NCCL), backend, dtype, case, geometry, seed, and per mode its
//                               world, run id and rank 0's accounting
// One DIR holds one image of one case: each mode's dump adds its files and its entry in meta.json, which
// declares the mode only once its last rank file is written. Readers judge a mode only when the image is
// whole (docs/DESIGN.md §8): index_image names every missing, orphan, foreign-run or mislabelled file.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.hpp"
#include "core/safetensors.hpp"
#include "harness/world.hpp"

namespace gdnv::probes {

// A built-in deterministic case: the geometry of the dumped layer run.
struct ProbeCase {
  std::string name, what;
  harness::RunSpec spec;  // layer, format, lengths / seq_len, gates; mode, world, dtype and seed set per dump
};
const std::vector<ProbeCase>& probe_cases();
// The case name of a dump made from geometry options instead of a probe case: the options that rebuild it
// ("--format thd --lengths 40,200,16 --hidden 64 ... --gates default"), so the image names its inputs.
std::string geometry_case_name(const harness::RunSpec& geometry);

struct DumpSpec {
  std::string mode = "cp1";  // cp1 | headwise | chunkwise | all_gather
  std::string image;         // label
  std::string case_name = "thd-gva";
  // In place of a probe case: the layer, format, lengths / seq_len, batch and gates (case_name is then
  // geometry_case_name of it).
  std::optional<harness::RunSpec> geometry;
  DType dtype = DType::F32;
  std::uint64_t seed = 0;
  std::string backend = "cpu";  // what computed it (gdn-verify --backend), recorded in meta.json
  bool stages = false;          // also dump each rank's part of every named stage (docs/DESIGN.md §1.3)
  std::string run;              // the run id every rank file carries; empty: dump_rank draws it (shared_run_id)
};

// A fresh run id: 16 hex digits from the system's entropy and clock, one per dump of a mode.
std::string new_run_id();
// new_run_id drawn by rank 0 and broadcast over `world` (collective; host memory): what every rank of one
// dump carries. A device-memory world (emu, NCCL) gets it from the host world that launched it instead.
std::string shared_run_id(comm::Communicator& world);

// The RunSpec of a dump on `world_size` ranks, checked (harness::validate_run); ConfigError for an unknown
// mode or case, cp1 on more than one rank, or an illegal combination (docs/DESIGN.md §3.1, the messages of
// `gdn-verify run`).
harness::CheckedRun dump_run_spec(const DumpSpec& spec, int world_size);

// This rank's part of the dump (collective over `world`, whose Memory is the backend's): runs the layer
// fwd+bwd on `backend` and writes DIR/<mode>.rank<r>.safetensors; rank 0 also writes inputs.safetensors
// and meta.json. `transport` ("inproc" | "mpi") is recorded in meta.json. Files are written only after
// every rank has computed, in docs/DESIGN.md §8's order: meta.json without the mode, every rank file
// (carrying spec.run, or the id shared_run_id draws over `world`), then meta.json declaring the mode.
void dump_rank(const DumpSpec& spec, const std::string& dir, const std::string& transport, comm::Communicator& world,
               std::unique_ptr<cp::Backend> backend);

// A file of DIR that keeps the image from being whole, and why.
struct ImageProblem {
  std::string file, what;
};

// DIR as its meta.json declares it (docs/DESIGN.md §8): the image's storage dtype (meta.json's, which
// inputs.safetensors, every rank file and every out / grad_hidden must carry; grad:: in the state
// dtype), the modes whose rank files 0..world-1 are all there, all of the declared run and of this
// image, in cp1, headwise, chunkwise, all_gather order; and every problem found. A problem of
// meta.json or inputs.safetensors leaves no mode whole. FormatError for a meta.json that is not the
// JSON object a dump writes.
struct ImageIndex {
  DType dtype = DType::F32;
  std::vector<std::string> modes;
  std::map<std::string, int> world;  // of each whole mode
  std::vector<ImageProblem> problems;
};
ImageIndex index_image(const std::string& dir);

// DIR/inputs.safetensors as the oracle harness's case.
harness::Case read_inputs(const std::string& dir);

// DIR/<mode>.rank<r>.safetensors.
std::string rank_file(const std::string& dir, const std::string& mode, int rank);

// A whole mode's dump (index_image) on `world` ranks in natural order, as the harness assembles a run:
// out and grad_hidden reassembled from every rank's zigzag shard, the gradients from rank 0 (every
// other rank's copy is judged against it: the readers' replica check), the stages (when dumped) from
// every rank's pieces with who computed what (stage_pieces), all F64; FormatError naming the file when
// a shard does not fit the partition.
harness::MicroBatchRun assemble_run(const std::string& dir, const std::string& mode, int world,
                                    const harness::Case& inputs);
// assemble_run's tensors by name: out, grad_hidden, grad::<param>, stage::<s>, stage_grad::<s>.
TensorFile assemble(const std::string& dir, const std::string& mode, int world, const harness::Case& inputs);
TensorFile answer_file(const harness::Answer& answer);

// Whether the mode's dump holds stages.
bool has_stages(const std::string& dir, const std::string& mode);

// How the image's implementation forms its decays, as meta.json's "decay_class" declares it (absent:
// product-of-decays, the class of this project's backends); FormatError for an unknown class.
harness::DecayClass declared_decay_class(const std::string& dir);
// Whether DIR's meta.json names the adapter that wrote it: an image of a third-party implementation
// (docs/DESIGN.md §4: its CP verdict is relative to its own cp1).
bool third_party_image(const std::string& dir);

// The library a third-party image's meta.json says computed it ("library", written by the Python bridge in the
// process that imported it: docs/DESIGN.md §14, docs/json_format.md): its import name, version, the package
// directory imported, the sha256 of its GDN source files and their count, the commit of its own checkout
// ("" when not one), and the kernel library it ran, where it names one (Megatron's layer runs FLA's kernels).
struct Library {
  std::string name, version, path, source_sha256, commit;
  std::int64_t files = 0;
  std::vector<Library> kernels;  // none or one
};
// DIR's library; nullopt when meta.json names none (this project's own images). A "library" that is not that
// object is a FormatError naming meta.json and the key (every reader of meta.json checks it).
std::optional<Library> image_library(const std::string& dir);
// A report header's line: "library: fla 0.6.0 at /p/fla (sha256 1a2b3c4d... of 43 files, commit abc1234)", and
// "; kernels: fla 0.4.2 at ..." after a library that names its kernels.
std::string library_line(const Library& library);

}  // namespace gdnv::probes
