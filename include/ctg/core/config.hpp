#pragma once
// Portability macros shared by host and device code.

// ctg's types carry names and constants as template arguments of class and
// floating-point type (C++20, P1907). A compiler without them failed deep in
// a header ("non-type template argument of type 'double' is not yet
// supported", clang 14): say why first. (clang has them from 18.)
#if (!defined(__cpp_nontype_template_args) || __cpp_nontype_template_args < 201911L) && \
    !(defined(__clang__) && __clang_major__ >= 18)
#error "ctg: this compiler lacks C++20 template arguments of class and floating-point type (P1907), which ctg's types carry: use g++ 12 or newer, or clang 18 or newer, with -std=c++20"
#endif

// Every check of a value for NaN or inf (a failing step writes nothing, an
// optimizer refuses a non-finite gradient) is folded away to "finite" by
// -ffinite-math-only, and -fassociative-math undoes exp's range reduction
// (exp(-0.3) came out 1): with -ffast-math or -Ofast, ctg returned wrong
// values and wrote NaN silently. -freciprocal-math changes a division's
// bits (fused and unfused steps, CPU and GPU, would differ).
#if (defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__) || defined(__ASSOCIATIVE_MATH__) || \
    defined(__RECIPROCAL_MATH__) || defined(__FAST_MATH__)
#error "ctg: -ffast-math (and -Ofast, -ffinite-math-only, -fassociative-math, -freciprocal-math) would fold ctg's NaN and inf checks away and change its results: compile the files that include ctg without them"
#endif

// Errors are exceptions (ctg::error): without them the first error was one
// deep in a header.
#if !defined(__cpp_exceptions) && !defined(__CUDA_ARCH__)
#error "ctg: reports errors as exceptions (ctg::error): compile the files that include ctg with exceptions (without -fno-exceptions)"
#endif

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

// CTG_INLINE_LAMBDA, after a lambda's parameter list, inlines its body into
// the loop that calls it (g++ otherwise may keep a large body out of line,
// and a loop that calls a function does not vectorize).
#if defined(_MSC_VER)
#define CTG_INLINE_LAMBDA [[msvc::forceinline]]
#else
#define CTG_INLINE_LAMBDA __attribute__((always_inline))
#endif

// CTG_NOINLINE keeps a whole step's body out of its caller: inlined into a
// training loop next to the optimizer, g++'s loop passes can take minutes.
#if defined(_MSC_VER)
#define CTG_NOINLINE __declspec(noinline)
#else
#define CTG_NOINLINE __attribute__((noinline))
#endif

// CTG_UNROLL unrolls the next loop, whose trip count is a constant, in device
// code: a GPU thread keeps an array in registers only when every index into it
// is known at compile time (else the array lives in local memory, which is
// DRAM behind the caches). Host compilers decide for themselves.
#if defined(__CUDA_ARCH__)
#define CTG_UNROLL _Pragma("unroll")
#else
#define CTG_UNROLL
#endif

// CTG_HOT_BEGIN ... CTG_HOT_END enclose the code that runs once per element
// (dtype conversions, element functions, group loops, the GEMM, the
// optimizer's update). Under g++ it is compiled with -ffp-contract=off: each
// node's output is rounded once, as the unfused reference, PyTorch and the
// GPU (--fmad=false) round it, and g++'s default (fast) fused a product node
// into the add node after it wherever the target has an FMA (-march=native,
// -mfma): fused and unfused steps then differed in their last bits. Without
// optimization (-O0: a Debug build, the asan preset) that code is compiled
// with -O2 too, so a debug build of a model can train; everything else keeps
// the debug flags (and -g applies to all of it). -DCTG_DEBUG_KERNELS keeps
// the hot code at -O0. clang's default contracts a*b+c within one
// expression (silu's gradient, 1 + x*(1 - s), became one FMA with -mfma):
// there the code is compiled with `fp contract(off)`, its optimization
// level the file's.
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#if !defined(__OPTIMIZE__) && !defined(CTG_DEBUG_KERNELS)
#define CTG_HOT_BEGIN _Pragma("GCC push_options") _Pragma("GCC optimize(\"O2\", \"fp-contract=off\")")
#else
#define CTG_HOT_BEGIN _Pragma("GCC push_options") _Pragma("GCC optimize(\"fp-contract=off\")")
#endif
#define CTG_HOT_END _Pragma("GCC pop_options")
#elif defined(__clang__) && !defined(__CUDACC__)
#define CTG_HOT_BEGIN _Pragma("float_control(push)") _Pragma("clang fp contract(off)")
#define CTG_HOT_END _Pragma("float_control(pop)")
#else
#define CTG_HOT_BEGIN
#define CTG_HOT_END
#endif

// CTG_IVDEP, before a loop: its iterations carry no dependence through
// memory (a block of 16 elements whose outputs never alias its inputs), so
// the compiler vectorizes it without a run-time overlap check.
#if defined(__clang__)
#define CTG_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define CTG_IVDEP _Pragma("GCC ivdep")
#else
#define CTG_IVDEP
#endif
