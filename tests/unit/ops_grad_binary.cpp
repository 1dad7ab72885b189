// Binary arithmetic (+ - * /) with numpy broadcasting: same shapes and a bias on
// either side. Forward values against a broadcasting reference written in the test,
// gradients of BOTH operands against central finite differences (f64).
// More broadcast shapes, literals and leaves used twice: ops_grad_broadcast.cpp.
#include "binary_cases.hpp"

TEST_CASE_TEMPLATE("binary op, same shape or bias: forward value and gradients of both operands", K,
                   OPS_X_CONFIG(same), OPS_X_CONFIG(bias), OPS_X_CONFIG(bias_left)) {
  binary_cases::run_binary_case<K>();
}
