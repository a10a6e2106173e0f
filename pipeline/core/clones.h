// PREPFLOW_CLONES: compile a function for AVX2 and for the baseline, picked
// at load time by the CPU. Used only where both give identical bits: the
// pipeline targets build with FP contraction off, so the clones differ in
// vector width, never in the order or rounding of operations.
#ifndef PREPFLOW_PIPELINE_CORE_CLONES_H_
#define PREPFLOW_PIPELINE_CORE_CLONES_H_

#if defined(__SANITIZE_THREAD__)
// The clones' ifunc resolver runs while the program is being relocated,
// before ThreadSanitizer's runtime exists, and its instrumentation crashes
// there: one generic version under TSan.
#define PREPFLOW_CLONES
#else
#define PREPFLOW_CLONES __attribute__((target_clones("avx2", "default")))
#endif

#endif  // PREPFLOW_PIPELINE_CORE_CLONES_H_
