// DeDLOC (arXiv 2106.10207): collaborative data-parallel training, and the load balancing of its
// all-reduce.
//
// Every peer holds the whole model and accumulates gradients at its own pace, telling every other
// peer after each micro-batch how many samples it has (kProgress; its message kinds are its own,
// named in dedloc.cc), until the collaboration has
// training.target_batch samples for the step; each peer then finishes its micro-batch and enters
// one all-reduce of its gradient sum (its mean times its samples) with the others, and all take
// the optimizer step on the sum over the collaboration's samples. The all-reduce is DeDLOC's
// butterfly: the vector is cut in parts, peer i aggregates part i (every other peer sends it its
// slice, kPart; it sends the sum back to every peer, kPartSum), and the parts' sizes are the shares
// of a linear programme over the peers' bandwidths. A client_only peer (no inbound connections)
// sends its slices and aggregates none.
//
// The programme, per byte of the vector (n peers, share w_i, c_i = min(up_i, down_i)): peer i sends
// and receives 1 + (n - 2) w_i bytes (its slices of the others' parts, its part from each of the
// n - 1 others and back to them), so
//   minimise T  subject to  (1 + (n - 2) w_i) / c_i <= T,  sum w_i = 1,  w_i >= 0,  w_i = 0 for a
//   client_only peer,
// and, among the optima, the shares as even per unit of bandwidth as T allows (a second objective
// term, 1e-6 max_i w_i / c_i). GLPK's simplex solves it.
#pragma once

#include <cstdint>
#include <vector>

namespace rv {

struct Shares {
  std::vector<double> share;    // per peer; sum 1; 0 for client_only peers
  double seconds_per_byte = 0;  // T: the all-reduce's time per byte of the vector, bandwidth only
};

// `up`, `down`: bytes per second per peer. Throws rv::InputError if every peer is client_only.
Shares dedloc_shares(const std::vector<double>& up, const std::vector<double>& down,
                     const std::vector<bool>& client_only);

// Peer i aggregates elements [bounds[i], bounds[i + 1]) of a vector of `n` (rounded shares).
std::vector<int64_t> part_bounds(const std::vector<double>& share, int64_t n);

}  // namespace rv
