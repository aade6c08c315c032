#pragma once
// How gdn-verify's programs hold on to memory.

namespace gdnv {

// The oracle allocates and frees tensors of 10-100 MB many times per layer. glibc returns every block
// over 32 MB to the kernel on free, and the next allocation faults the pages back in, zeroed: 1.7 s of
// a 5.6 s fp64 layer forward + backward at T = 4096 (bench_reference). This keeps freed memory in the
// process for the next tensor instead; call it before running layers. A kernel-level oracle is one
// pass over its tensors and reuses nothing, while the heap's fragmentation would add 9% to its peak
// RSS (1.35 -> 1.47 GB at T = 32768), and a single layer of real size (`reference` on a layer file)
// reuses too little: there the kept blocks add 0.8 GB to a 2.8 GB peak. Commands that run many small
// layers (gate, run, probe, fixtures) and the benches call it.
void keep_freed_memory();

}  // namespace gdnv
