// Harness self-test (not a compile-fail pair): this program fails with the expected error,
// but no line of the compiler's output names what the expect-note line asks for (the note
// names check<int>, not check<long>), so the check must report it ("wrong_message").
// expect-error: ctg: shape mismatch
// expect-note: T = long

template <class T>
void check(T) {
  static_assert(sizeof(T) == 0, "ctg: shape mismatch");
}

int main() {
  check(1);
  return 0;
}
