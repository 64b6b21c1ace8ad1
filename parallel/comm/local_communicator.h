// The Local backend: a group of one process, without MPI. What Communicator::world() is in a
// plain process (no launcher), and what split() gives on it. Every collective completes at once
// (all_reduce and broadcast leave the tensor as it is, all_gather and reduce_scatter copy);
// there is no peer to send to or receive from.
#pragma once

#include <memory>

#include "parallel/comm/communicator.h"

namespace trident::parallel::comm {

std::shared_ptr<Communicator> make_local_communicator(const CommOptions& options);

}  // namespace trident::parallel::comm
