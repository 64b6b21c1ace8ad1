// --device for the training applications (train_gpt2, train_bert, train_imagenet, generate).
//
// NOTE [Device in the apps]: `--device cpu | cuda | cuda:N`. The model is built on the CPU from
// the seed (so a run's initial weights are the same on every device) and then moved with
// Module::to; the optimizer is made after the move, so its state is created on the device; the
// loader's batches (host tensors) go to the device one step at a time (to_device below), after the
// loss counts were taken from the host copy. Autocast and the GradScaler work on either device.
// Checkpoints are written from the device (the safetensors writer copies each tensor to the host)
// and read onto it (the state dict loads copy into the device parameters, the optimizer state is
// made on its parameters' device). The loss of a step stays on the device and is read once per
// logged step (the one synchronization the loop asks for; clipping's norm is another). Under
// --dp/--pp/--tp the apps build the CPU communicators (MPI): nothing selects the NCCL
// communicator yet, so a parallel run with --device cuda is refused in one line.
#pragma once

#include <string>

#include "core/device.h"
#include "core/device_info.h"
#include "models/layer_list.h"

namespace trident::apps {

// Parses and checks --device (`flag` names the option in messages). Errors, in one line each:
// not cpu/cuda/cuda:N; a build without CUDA; no CUDA device found; an ordinal past the visible
// devices; a CUDA device in a parallel run (`parallel`: dp x pp x tp > 1).
Device resolve_device(const std::string& value, bool parallel = false, const std::string& flag = "--device");

// "cpu", or "cuda:0 (NVIDIA H200, compute capability 9.0, 140 GiB)".
std::string describe_device(Device d);

// The batch's tensors on `d` (the same tensors when they are there already).
models::Batch to_device(const models::Batch& batch, Device d);

}  // namespace trident::apps
