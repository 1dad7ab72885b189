#pragma once
// Portability macros shared by host and device code.

// CTG_HD marks functions callable from host and device code. It vanishes for a
// plain C++ compiler, so the same element functions serve the CPU backend and
// the CUDA kernels.
#if defined(__CUDACC__)
#define CTG_HD __host__ __device__
#else
#define CTG_HD
#endif

#if defined(_MSC_VER)
#define CTG_FORCEINLINE __forceinline
#else
#define CTG_FORCEINLINE inline __attribute__((always_inline))
#endif

// CTG_NOINLINE keeps a whole step's body out of its caller: inlined into a
// training loop next to the optimizer, g++'s loop passes can take minutes.
#if defined(_MSC_VER)
#define CTG_NOINLINE __declspec(noinline)
#else
#define CTG_NOINLINE __attribute__((noinline))
#endif
