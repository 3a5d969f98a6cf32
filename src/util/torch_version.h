// The one place that reads libtorch's version. Lines that must differ between libtorch releases
// go under #if ZS_TORCH_AT_LEAST(major, minor); docs/porting.md lists each, with the test that
// pins it.
#pragma once

#include <torch/version.h>

#define ZS_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))
