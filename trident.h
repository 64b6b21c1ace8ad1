// Trident's public API in one include.
#pragma once

#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "core/allocator.h"
#include "core/copy.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/arith.h"
#include "ops/attention.h"
#include "ops/conv.h"
#include "ops/compare.h"
#include "ops/copy.h"
#include "ops/dropout.h"
#include "ops/index.h"
#include "ops/linalg.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/pool.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/softmax.h"
#include "ops/unary.h"

// data/ (tokenizers, shards, datasets) exists when the build found its dependencies
// (TRIDENT_DATA); its headers need none of them.
#include "trident_config.h"
#if TRIDENT_HAVE_DATA
#include "data/bert_examples.h"
#include "data/dataset.h"
#include "data/gpt2_tokenizer.h"
#include "data/lm_dataset.h"
#include "data/token_shard.h"
#include "data/wordpiece_tokenizer.h"
#endif
