// ctg's types carry names and constants as template arguments of class and
// floating-point type (C++20, P1907). Compiled without them (here as C++17,
// as clang before 18 compiles everything), the first error says so (it was
// an error deep in a header). The corrected twin is compiled as C++20.
// expect-error: ctg: this compiler lacks C\+\+20 template arguments of class and floating-point type
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 4>;

int main() {
  auto step = ctg::forward(ctg::sum(X{} * ctg::lit<0.5>));
  (void)step;
}
