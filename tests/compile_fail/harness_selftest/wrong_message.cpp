// Harness self-test (not a compile-fail pair): this program fails to compile, but with a
// different message than the expected one, so the check must report it ("wrong_message").
// The expected text is also printed as a *warning* below, and appears in this file: neither
// may count as a match -- only error lines do.
// It has no working corrected twin either (it fails with or without CTG_CORRECTED), which
// compile_fail_harness.detects_broken_twin uses.
// expect-error: ctg: loss does not require grad

#warning "ctg: loss does not require grad"

template <class T>
void check(T) {
  static_assert(sizeof(T) == 0, "ctg: shape mismatch");
}

int main() {
  check(1);
  return 0;
}
