# ctg_cuda_executable(<target> <source>): a program compiled by nvcc the way
# every CUDA source of ctg is (device tests, GPU benchmarks): sm_90a and
# sm_80, C++20, linked with ctg, the CUDA runtime and cuBLASLt.
function(ctg_cuda_executable target src)
  add_executable(${target} ${src})
  ctg_cuda_options(${target})
endfunction()

# ctg_cuda_options(<target>): the same for a target's .cu sources (a program
# of C++ and CUDA sources: examples/tiny_lm).
function(ctg_cuda_options target)
  set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES "90a;80")
  # C++20: CMake < 3.26 has no CUDA_STANDARD 20 for nvcc ("CUDA20" is unknown
  # to it), so the flag is given directly.
  if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.26)
    set_target_properties(${target} PROPERTIES CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON CUDA_EXTENSIONS OFF)
  else()
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>)
  endif()
  target_link_libraries(${target} PRIVATE ctg::ctg CUDA::cudart CUDA::cublasLt)
  # host-side warnings through nvcc's host compiler; device side: nvcc's own,
  # less #186 ("pointless comparison of unsigned integer with zero"), which
  # every rank-generic loop `i < Shape::rank` triggers for scalars.
  # --fmad=false: no multiply-add contraction the source does not write, so
  # device element functions give the CPU's bits (exec/cuda/runtime.cuh).
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra --fmad=false --diag-suppress=186>)
endfunction()
