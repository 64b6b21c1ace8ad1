// Helpers shared by the model tests.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "test_util.h"
