// Helpers for chain tests: greedy generation through any pipeline.
#pragma once

#include "runtime/pipeline.h"
#include "transport/chain.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace skippy::testing {

inline std::vector<token_id> greedy_tokens(pipeline_i & p, const std::vector<token_id> & prompt, int32_t n,
                                           int32_t lane = 0, int32_t chunk = 512) {
    generation_request req;
    req.prompt = prompt;
    req.max_tokens = n;
    req.prefill_chunk_tokens = chunk;
    req.sampling.temperature = 0;
    auto res = run_generation(p, lane, req);
    EXPECT_TRUE(res.is_ok()) << res.error().to_string();
    return res.is_ok() ? res->tokens : std::vector<token_id>{};
}

inline std::unique_ptr<pipeline_i> embedded_chain(std::shared_ptr<const gguf::file> file, int32_t n_stages, int32_t lanes = 1,
                                                  int32_t threads = 1, int32_t ctx = 256) {
    stage_options so;
    so.n_threads = threads;
    so.n_lanes = lanes;
    so.ctx_size = ctx;
    auto p = transport::make_embedded_chain(std::move(file), n_stages, so, {});
    EXPECT_TRUE(p.is_ok()) << p.error().to_string();
    return p.is_ok() ? std::move(p).value() : nullptr;
}

// Stage 0 of the chain described by `topo_path`, run in this process with `n_lanes`
// lanes and one thread (the other stages run elsewhere); null, with a test failure,
// when the topology, the model or the chain cannot be set up.
inline std::unique_ptr<transport::chain_pipeline> local_stage0(const std::string & topo_path, int32_t n_lanes,
                                                               const transport::chain_options & co = {}) {
    auto topo = transport::topology::load(topo_path);
    EXPECT_TRUE(topo.is_ok()) << topo.error().to_string();
    if (!topo.is_ok()) return nullptr;
    auto f = gguf::file::open(topo->model_path);
    EXPECT_TRUE(f.is_ok()) << f.error().to_string();
    if (!f.is_ok()) return nullptr;
    stage_options so;
    so.n_threads = 1;
    so.n_lanes = n_lanes;
    auto chain = transport::make_topology_chain(std::shared_ptr<const gguf::file>(std::move(f).value()), *topo, so, co);
    EXPECT_TRUE(chain.is_ok()) << chain.error().to_string();
    return chain.is_ok() ? std::move(chain).value() : nullptr;
}

}  // namespace skippy::testing
