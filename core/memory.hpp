#pragma once
// How gdn-verify's programs hold on to memory.

namespace gdnv {

// The oracle allocates and frees tensors of 10-100 MB many times per layer. glibc returns every block
// over 32 MB to the kernel on free, and the next allocation faults the pages back in, zeroed: 1.7 s of
// a 5.6 s fp64 layer forward + backward at T = 4096 (bench_reference). Called once at the start of a
// program, this keeps freed memory in the process for the next tensor instead. Peak RSS barely moves
// (+9% on `reference` at T = 32768), since the blocks are reused, not added.
void keep_freed_memory();

}  // namespace gdnv
