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
// logged step (the one read the loop asks for; gradient clipping keeps its norm on the device,
// fp16's overflow check reads one flag per step, and each batch's upload from pageable host
// memory waits for the stream, NOTE [Cross-device copies]). Under
// `mpirun -np N ... --dp N --device cuda` each rank takes one GPU (rank_device) and the
// gradients' bucketed all-reduces go over an NCCL communicator bootstrapped over the MPI dp group
// (apps/train_common.cpp), while host numbers (loss counts, the logged loss) stay on MPI. --pp,
// --tp and --zero still communicate CPU tensors over MPI, so with --device cuda they are refused
// in one line. (The NCCL path has not run: it needs two GPUs.)
#pragma once

#include <string>

#include "core/device.h"
#include "core/device_info.h"
#include "models/layer_list.h"

namespace trident::apps {

// Parses and checks --device (`flag` names the option in messages). Errors, in one line each:
// not cpu/cuda/cuda:N; a build without CUDA; no CUDA device found; an ordinal past the visible
// devices; a CUDA device in a run that `model_parallel` says splits the model or the optimizer
// (--pp or --tp > 1, --zero): data parallelism alone runs on GPUs (NCCL), the rest not yet.
Device resolve_device(const std::string& value, bool model_parallel = false, const std::string& flag = "--device");

// The GPU of this rank in a multi-process run given `--device cuda` without an index: the
// launcher's local rank (OMPI_COMM_WORLD_LOCAL_RANK, else world_rank) modulo the visible devices,
// so that `mpirun -np N` on a host of N GPUs puts one rank on each. An explicit cuda:N is kept.
Device rank_device(Device requested, const std::string& value, int world_rank);

// "cpu", or "cuda:0 (NVIDIA H200, compute capability 9.0, 140 GiB)".
std::string describe_device(Device d);

// The batch's tensors on `d` (the same tensors when they are there already).
models::Batch to_device(const models::Batch& batch, Device d);

}  // namespace trident::apps
