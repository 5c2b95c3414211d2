#pragma once
/// \file
/// How the process's allocator treats the large tensors of a training step.
///
/// glibc serves every allocation above its mmap threshold (32 MiB at most) with a fresh mmap and
/// returns it on free. A frozen-backbone step allocates and frees the same activation tensors
/// (tens to hundreds of MiB each) at every layer and every step, so each one is page-faulted in
/// (and zeroed by the kernel) anew: on this project's 2-core reference machine that doubled the
/// time of an fp32 step (bench/README.md has the measurements). Keeping freed memory in the heap
/// reuses pages that are already mapped.

namespace pets {

/// Large allocations come from the heap instead of mmap and freed memory is kept for reuse
/// (glibc's M_MMAP_MAX = 0, M_TRIM_THRESHOLD and M_TOP_PAD large): the process's resident size
/// stays at its peak instead of shrinking between steps. Returns false when the allocator refused
/// a setting. Process-wide, and not undone: glibc's adaptive thresholds stay off once set, so a
/// comparison with the defaults measures them first.
bool retain_freed_memory();

}  // namespace pets
