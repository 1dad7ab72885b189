// Harness self-test (not a compile-fail pair): this program fails with the expected
// message, but a second error follows it, so the check must report the count
// ("wrong_error_count"). Registered with WILL_FAIL as
// compile_fail_harness.detects_error_cascade.
// expect-error: ctg: shape mismatch
// expect-error-count: 1

template <class T>
void check(T) {
  static_assert(sizeof(T) == 0, "ctg: shape mismatch");
}

int main() {
  check(1);
  int x = "not an int";  // the cascade
  return x;
}
