#pragma once
// The environment a test sets before it starts mpirun: OpenMPI's opt-in for running as root (CI runs
// as root), and no LeakSanitizer in the MPI processes of a sanitizer build, since OpenMPI leaks its
// dlopen'd components' allocations at MPI_Finalize (frames in unloaded modules: not suppressible by
// name). Address and UB checks stay on; an ASAN_OPTIONS the caller set is kept.
#include <cstdlib>

namespace gdnv::testing {

inline void prepare_mpirun_env() {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("ASAN_OPTIONS", "detect_leaks=0", 0);
}

}  // namespace gdnv::testing
