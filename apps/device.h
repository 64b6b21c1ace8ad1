// --device for the training applications (train_gpt2, train_bert, train_imagenet, generate).
//
// NOTE [Device in the apps]: `--device cpu | cuda | cuda:N`. The model is built on the CPU from
// the seed (so a run's initial weights are the same on every device) and then moved with
// Module::to; the optimizer is made after the move, so its state is created on the device; the
// loader's batches (host tensors) go to the device one step at a time (models::Batch::to), after the
// loss counts were taken from the host copy. Autocast and the GradScaler work on either device.
// Checkpoints are written from the device (the safetensors writer copies each tensor to the host)
// and read onto it (the state dict loads copy into the device parameters, the optimizer state is
// made on its parameters' device). The loss of a step stays on the device and is read once per
// logged step (the one read the loop asks for; gradient clipping keeps its norm on the device,
// fp16's overflow check reads one flag per step, and each batch's upload from pageable host
// memory waits for the stream, NOTE [Cross-device copies]). Under
// `mpirun -np N ... --dp N --device cuda` each rank takes one GPU (rank_device) and the
// gradients' bucketed all-reduces go over an NCCL communicator bootstrapped over the MPI dp group
// (apps/train_common.cpp), while host numbers (loss counts, the logged loss) stay on MPI; --zero
// reduce-scatters and all-gathers its buckets over the same NCCL group (NOTE [ZeRO-1 on GPUs]).
// --pp and --tp run on GPUs too (NOTE [Model parallelism on GPUs]). (No NCCL path has run with
// more than one rank yet: that needs two GPUs.)
//
// NOTE [Model parallelism on GPUs]: `mpirun -np N ... --device cuda` with --tp and --pp (and
// --dp, --zero), one GPU per rank:
//   - tensor parallelism: the split layers' collectives on activations and their gradients (two
//     all-reduces per block forward, the vocabulary-parallel loss, sequence parallelism's
//     gathers and reduce-scatters) go over an NCCL communicator bootstrapped over the mesh's MPI
//     tp group (tensor_parallel_layers in apps/train_common.cpp): the traffic Megatron-LM puts
//     on NVLink. What happens once per step or checkpoint over tp (the clipping norm's squares,
//     gathering split tensors into a checkpoint) stays on the MPI group, CUDA tensors staged
//     through pinned host memory (NOTE [Host staging]).
//   - pipeline parallelism: each stage on its rank's GPU (NOTE [Pipeline on GPUs]): micro-batches
//     moved there by the pipeline, activations and their gradients sent between stages over the
//     MPI pp group, staged through pinned host memory (a stage boundary moves one micro-batch's
//     hidden states each way: 6 MiB for GPT-2 124M at 4 x 1024 tokens in bf16), with the
//     headers, losses and traces it sends as host tensors.
//   - data parallelism: the gradients over an NCCL group of the dp ranks, bucketed (DataParallel;
//     under --pp started after the rank's last backward pass and waited for after the step, NOTE
//     [Overlapped pipeline gradients], ZeRO-1's reduce-scatter alike);
//     loss counts, losses and batch norm totals over the MPI dp group.
// The CPU runs the same code with every group on MPI (the tests); only the communicators' backend
// differs on GPUs.
#pragma once

#include <string>

#include "core/device.h"
#include "core/device_info.h"

namespace trident::apps {

// Parses and checks --device (`flag` names the option in messages). Errors, in one line each:
// not cpu/cuda/cuda:N; a build without CUDA; no CUDA device found; an ordinal past the visible
// devices.
Device resolve_device(const std::string& value, const std::string& flag = "--device");

// NOTE [Rank to GPU]: which GPU a rank of a multi-process run takes.
//   - `--device cuda` (no index): the GPU (local rank) mod (visible GPUs), the local rank being
//     this process's rank among the ranks on its node (node_local_rank), so `mpirun -np N` on
//     nodes of N GPUs puts one rank on each GPU of each node. More ranks on a node than visible
//     GPUs (when more than one is visible) is an error: two ranks of an NCCL group on one GPU are
//     not supported by NCCL (it refuses or hangs).
//   - `--device cuda:N`: kept as it is when this rank is alone on its node, or when each rank
//     sees a single GPU (CUDA_VISIBLE_DEVICES set per rank, the other way to give each rank its
//     own GPU). With several ranks on the node sharing a view of several GPUs it is an error, not
//     an offset: every rank would take the same GPU N, which is almost certainly a mistake, and
//     silently moving ranks to other GPUs would run on GPUs the user did not name.
//   - one visible GPU shared by several ranks on the node (-np 2 on a one-GPU machine, no
//     CUDA_VISIBLE_DEVICES) cannot be told apart from per-rank visibility here; NCCL reports the
//     duplicate GPU itself.
struct LocalRank {
  int rank = 0;
  int size = 0;        // ranks on this node; 0 when the source does not say
  std::string source;  // "MPI_COMM_TYPE_SHARED", "OMPI_COMM_WORLD_LOCAL_RANK", ..., for messages
};

// The launcher's environment: OMPI_COMM_WORLD_LOCAL_RANK (+ _LOCAL_SIZE, OpenMPI), MPI_LOCALRANKID
// (+ MPI_LOCALNRANKS, MPICH/Intel MPI), SLURM_LOCALID (srun; size unknown), in that order; else
// {world_rank, 0, "world rank"}. A value that is not a non-negative integer is an error naming it.
LocalRank local_rank_from_env(int world_rank);
// MPI's node-local rank (MPI_COMM_TYPE_SHARED) when MPI is initialized (a collective: every rank
// calls it), else local_rank_from_env.
LocalRank node_local_rank(int world_rank);

// The pure mapping of NOTE [Rank to GPU] (no CUDA call): `requested` as resolve_device returned
// it, `has_index` whether the flag named an index, `device_count` the GPUs this process sees.
Device map_rank_device(Device requested, bool has_index, const LocalRank& local, int device_count,
                       const std::string& flag = "--device");

// NOTE [Rank to GPU] for this process: node_local_rank, the visible GPUs, map_rank_device.
// `value` is the flag's text ("cuda" or "cuda:N").
Device rank_device(Device requested, const std::string& value, int world_rank);

// "cpu", or "cuda:0 (NVIDIA H200, compute capability 9.0, 140 GiB)".
std::string describe_device(Device d);

}  // namespace trident::apps
