#pragma once
// Layers: each a template over its input expression, with parameter names
// composed from a compile-time prefix.
#include <ctg/nn/stack.hpp>
#include <ctg/nn/attention.hpp>
#include <ctg/nn/embedding.hpp>
#include <ctg/nn/init.hpp>
#include <ctg/nn/linear.hpp>
#include <ctg/nn/loss.hpp>
#include <ctg/nn/mlp.hpp>
#include <ctg/nn/norm.hpp>
#include <ctg/nn/transformer.hpp>
