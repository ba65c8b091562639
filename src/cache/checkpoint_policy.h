// Where a stage with recurrent layers takes snapshots (docs/kv-cache.md §6,
// "Checkpoints"). Its prefix restores only at a length where a snapshot of its
// recurrent state was taken with the KV, so records are taken at checkpoint lengths:
// every multiple of a spacing during prefill, the prompt's branch point (where it
// leaves the stored paths, stage_cache::prefill_checkpoints), plus the end of the
// prompt and of the generation (the records after the final chunk and at Stop, which
// snapshot the live state). A lookup restores the longest stored checkpoint inside the
// prefix it shares with the request and computes the rest.
//
//   spacing 64, min_tokens 32, a prompt of 200 tokens prefilled in chunks of 128:
//   chunk [0, 128)   -> 64, 128
//   chunk [128, 199) -> 192            the prompt's end (199) by the final record
//   a later prompt sharing 180 tokens restores 128, computes 52 + its own, and
//   snapshots at 180 (its branch point): the next one sharing them restores 180
#pragma once

#include <cstdint>
#include <vector>

namespace skippy::cache {

// The lengths in (pos_start, pos_start + n_tokens] at which a prefill chunk takes
// snapshots: the multiples of spacing_tokens that are at least min_tokens, ascending.
// None when spacing_tokens <= 0 or n_tokens <= 0.
std::vector<int64_t> prefill_checkpoints(int64_t pos_start, int64_t n_tokens, int64_t spacing_tokens, int64_t min_tokens);

}  // namespace skippy::cache
