// Internal to src/model, for tests: a seam on the mixture-of-experts router.
//
// llama.cpp's arithmetic differs from ours in the last bits, so where a row's k-th and
// (k+1)-th experts are nearly tied the two may route that row differently, and that one
// position's logits move by far more than the tolerance. Tests use this probe to show
// that every such deviation is exactly one near-tie (tests/model/moe_golden_test.cpp):
// they read the gaps, then force the runner-up and check that the position matches.
#pragma once

#include <cstdint>

namespace skippy::blocks {

class router_probe_i {
public:
    virtual ~router_probe_i() = default;
    // Called once per row of every mixture-of-experts layer, before its experts are
    // chosen: il is the slice-local layer, row the row of the pass, logits[n_expert] the
    // router's logits with its bias added. The probe may change them (the row is then
    // routed by the changed values). Called from the forward pass's worker threads,
    // rows of one layer concurrently: an implementation must be thread-safe.
    virtual void on_route(int32_t il, int64_t row, float * logits, int32_t n_expert, int32_t n_expert_used) = 0;
};

// Installs the probe for every forward pass of the process (null: none).
// REQUIRES: no forward pass in progress; the probe outlives its installation.
void set_router_probe(router_probe_i * probe);

}  // namespace skippy::blocks
