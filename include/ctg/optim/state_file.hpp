#pragma once
// Forwarding header: saving and loading moved to ctg/io/checkpoint.hpp (the
// file format to ctg/io/state_file.hpp). ctg::optim::save / load are the
// same functions as ctg::io::save / load:
//
//   ctg::optim::save("ckpt.ctg", store, opt);   // store + optimizer
//   ctg::optim::load("ckpt.ctg", store, opt);
#include <ctg/io/checkpoint.hpp>

namespace ctg::optim {
using io::load;
using io::save;
}  // namespace ctg::optim
