// The nn layer in one include: modules, layers, initializers.
#pragma once

#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/basic.h"
#include "nn/containers.h"
#include "nn/conv2d.h"
#include "nn/embedding.h"
#include "nn/grad_scaler.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/normalization.h"
#include "nn/pooling.h"
