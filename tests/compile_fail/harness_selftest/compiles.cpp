// Harness self-test (not a compile-fail pair): this program compiles, so the compile-fail
// check must report it ("compiled"). Registered with WILL_FAIL as
// compile_fail_harness.detects_compiling_program.
// expect-error: ctg: this message is never printed

int main() { return 0; }
