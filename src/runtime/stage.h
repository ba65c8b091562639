// A loaded stage: the weights of a layer range, its KV pool, and its lanes.
//
// A lane is one session: a KV sequence. Lanes of one stage may be driven from
// different threads; their compute is serialized on the stage (one pass at a time
// uses every thread of the pool). A pass may carry several lanes at once
// (forward_batch): one read of each weight matrix serves all of them, and every row's
// result is the one it has alone, whatever else is in the batch.
#pragma once

#include "base/status.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "kv/kv.h"
#include "model/model.h"

#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace skippy {

class constraint_cache;

struct stage_options {
    layer_range layers;              // {0, 0}: every layer of the model
    int32_t     n_threads = 0;       // 0: physical cores
    int32_t     ctx_size = 0;        // positions per lane; 0: min(model's context length, 4096)
    int32_t     n_lanes = 1;         // concurrent sessions
    kv_dtype    kv_type = kv_dtype::f16;
    int32_t     kv_block_tokens = 16;
    int64_t     kv_extra_blocks = 0; // pool blocks beyond n_lanes * ceil(ctx_size / block) (cache use)
    bool        huge_pages = true;   // the slice's weights on transparent huge pages (slice_options)
    // Threads to run on instead of a pool of n_threads of the stage's own. Stages in one
    // process share one: they mostly take turns, and two pools would have the idle one's
    // spinning workers steal cores from the busy one.
    std::shared_ptr<kernels::thread_pool> shared_pool;
};

// Number of physical cores (threads sharing a core counted once); at least 1.
int32_t physical_core_count();

// One lane's rows in a batched pass: positions [pos_start, pos_start + n_tokens).
struct lane_span {
    int32_t lane = 0;
    int64_t pos_start = 0;
    int64_t n_tokens = 0;
    // With recurrent layers: lengths in (pos_start, pos_start + n_tokens], ascending, at
    // which to copy the lane's recurrent state (a prefix cache's checkpoints; others are
    // ignored). The copies wait in the lane for take_captures.
    std::span<const int64_t> checkpoints = {};
};

class stage {
public:
    // Binds the layer range of `file` and allocates the KV pool.
    static result<std::unique_ptr<stage>> load(std::shared_ptr<const gguf::file> file, const stage_options & options);

    const model_slice & slice() const { return *slice_; }
    const model_hparams & hparams() const { return slice_->hparams(); }
    bool is_first() const { return slice_->range().start == 0; }
    bool is_last() const { return slice_->range().end == hparams().n_layer; }
    int32_t n_lanes() const { return static_cast<int32_t>(lanes_.size()); }
    int32_t ctx_size() const { return ctx_size_; }
    int32_t n_threads() const { return pool_->n_threads(); }
    kv_pool & kv() { return *kv_pool_; }
    // The grammars and the vocabulary trie of this stage's model (runtime/constraint.h).
    constraint_cache & constraints() const { return *constraints_; }

    // Positions [0, n) of the lane's KV are valid.
    int64_t lane_tokens(int32_t lane) const;
    kv_sequence & lane_kv(int32_t lane);

    // Runs this stage's layers for n_tokens tokens at positions [pos_start, +n_tokens)
    // of `lane`. Input: `tokens` on the first stage, else `act_in` [n_tokens, n_embd].
    // Output: the hidden rows after the stage's layers into act_out [n_tokens, n_embd].
    // Errors (bad lane, position gap, context full, token id out of range, KV pool
    // exhausted) leave the lane's earlier positions intact.
    status forward(int32_t lane, int64_t pos_start, std::span<const token_id> tokens, std::span<const float> act_in,
                   int64_t n_tokens, std::span<float> act_out);

    // Runs this stage's layers in place on x, which holds the input rows of every span
    // in span order ([sum of n_tokens, n_embd]: embeddings on the first stage, the
    // previous stage's output otherwise), as one pass. A span that cannot run (bad
    // lane, position gap, context full, KV pool exhausted) gets its error in
    // span_status and is left out, its rows untouched and its lane's earlier
    // positions intact; the others run. REQUIRES: distinct lanes;
    // span_status.size() == spans.size(). PROMISES: each row is bitwise what the
    // same span computes alone.
    void forward_batch(std::span<const lane_span> spans, float * x, std::span<status> span_status);

    // logits[n_rows, n_vocab] of hidden rows. REQUIRES: is_last().
    void logits(std::span<const float> hidden, int64_t n_rows, std::span<float> out);

    // Drops the lane's positions >= n_tokens. With recurrent layers the lane's state
    // follows only a truncation to its own length or to 0; any other leaves it invalid,
    // and the lane can then only restart at position 0.
    void truncate_lane(int32_t lane, int64_t n_tokens);

    // The slice has recurrent layers (qwen35): their per-lane state cannot be rebuilt
    // from KV, so a reused or restored KV prefix can only continue where the state is.
    bool has_recurrent_layers() const;
    // Positions the lane's recurrent state holds (lane_tokens without recurrent layers;
    // -1 when invalid or no such lane). A span may start at 0 or exactly here.
    int64_t lane_recurrent_tokens(int32_t lane) const;
    // The lane's recurrent state (null without recurrent layers or for a bad lane). Read
    // it only from the thread driving the lane, between its forwards.
    const recurrent_state * lane_recurrent(int32_t lane) const;
    // Replaces the lane's recurrent state with `state` (a restored checkpoint).
    // invalid_argument: bad lane, no recurrent layers, another shape, or a state that does
    // not hold exactly the lane's KV positions (restore the KV first).
    status set_lane_recurrent(int32_t lane, const recurrent_state & state);
    // The lane's state to restore into, in place (null as lane_recurrent). The caller
    // writes into it only a state of its shape holding exactly the lane's KV positions
    // (decode_recurrent_snapshot with those checks does), or leaves it alone.
    recurrent_state * lane_recurrent_for_restore(int32_t lane);
    // The copies forward_batch took for lane_span::checkpoints since the last call,
    // in position order (each one's n_tokens says where). A truncation drops them.
    std::vector<recurrent_state> take_captures(int32_t lane);

    // Called inside forward(), under the compute lock, to extend the lane's KV for
    // positions [pos_start, pos_start + n_tokens): `write` is the extension, and the
    // admission returns its status. A prefix cache evicts entries and then writes under
    // the lock its restores allocate under, so that a restore on another lane cannot
    // take the blocks it freed. Set once, before the stage serves requests.
    using kv_write_fn = std::function<status()>;
    using write_admission_fn = std::function<status(int32_t lane, int64_t pos_start, int64_t n_tokens, const kv_write_fn & write)>;
    void set_write_admission(write_admission_fn fn) { write_admission_ = std::move(fn); }

private:
    struct lane_state {
        std::unique_ptr<kv_sequence> kv;
        recurrent_state              recurrent;  // empty without recurrent layers
        std::vector<recurrent_state> captures;   // checkpoint copies not taken yet
    };
    stage() = default;
    status check_lane(int32_t lane) const;
    status check_span(const lane_span & span) const;
    // The model's pass over spans whose KV rows are prepared. REQUIRES: compute_mutex_.
    status run_layers(std::span<const lane_span> spans, float * x);

    std::shared_ptr<const gguf::file>     file_;
    std::shared_ptr<constraint_cache>     constraints_;
    std::unique_ptr<model_slice>          slice_;
    std::shared_ptr<kernels::thread_pool> pool_;
    std::unique_ptr<kv_pool>              kv_pool_;
    std::vector<lane_state>               lanes_;
    forward_workspace                     ws_;       // under compute_mutex_
    forward_workspace                     head_ws_;
    std::vector<sequence_span>            batch_spans_;  // run_layers' scratch, under compute_mutex_
    std::vector<recurrent_capture>        batch_captures_;
    int32_t                               ctx_size_ = 0;
    std::mutex                            compute_mutex_;
    write_admission_fn                    write_admission_;
};

}  // namespace skippy
