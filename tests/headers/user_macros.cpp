// ctg's headers compile after the object-like macros that common headers a
// training program may include define without a prefix: none of them may be
// an identifier in ctg. (Function-like min/max from <windows.h> are not
// covered: they also break the standard library's headers; define NOMINMAX.)

#if __has_include(<mpi.h>)
#include <mpi.h>  // before the macros: Open MPI's C++ header has a class Status
#endif

// Qt's keywords (qobjectdefs.h, qglobal.h) unless QT_NO_KEYWORDS.
#define signals public
#define slots
#define emit
#define foreach Q_FOREACH
#define forever for (;;)
// X11 (X.h, Xlib.h).
#define None 0L
#define Success 0
#define Status int
#define Bool int
#define True 1
#define False 0
#define Always 2
#define Above 0
#define Below 1
#define Complex 0
#define Convex 2
// Windows (rpcndr.h, minwindef.h, winnt.h, wingdi.h).
#define small char
#define hyper __int64
#define near
#define far
#define interface struct
#define IN
#define OUT
#define OPTIONAL
#define CONST const
#define VOID void
#define DELETE (0x00010000L)
#define ERROR 0
#define TRANSPARENT 1
#define OPAQUE 2

#include <ctg/ctg.hpp>
// The headers a user includes beside the umbrella one.
#include <ctg/dist/checkpoint.hpp>
#include <ctg/exec/cuda/gemm_plan.hpp>
#include <ctg/exec/cuda/launch_geometry.hpp>
#include <ctg/io/checkpoint.hpp>
#include <ctg/io/dot.hpp>
#include <ctg/io/graph_text.hpp>
#include <ctg/io/safetensors.hpp>
#include <ctg/io/torch_transformer_map.hpp>
#include <ctg/lower/describe.hpp>
#include <ctg/optim/optim.hpp>
#if __has_include(<mpi.h>)
#include <ctg/dist/mpi_comm.hpp>
#endif

int main() {}
