// A program of two CUDA units (first.cu, second.cu), each including every
// .cuh header of ctg: a kernel or a function a header defines neither inline
// nor as a template is defined in both, and the program does not link (the
// kernel delayed_scale_inv was). Linking is the test: it runs without a GPU.
#include "every_header.cuh"

int second_unit();

int main() { return second_unit(); }
