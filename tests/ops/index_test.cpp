#include "test_util.h"

using namespace trident;
using namespace trident::testing;
using autograd::TensorList;
