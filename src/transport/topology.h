// A chain's topology file (docs/transport.md):
//   {"model": PATH, "stages": [{"layers": [0, 2], "endpoint": "127.0.0.1:7100"},
//                              {"layers": [2, 5], "endpoint": "127.0.0.1:7101"}]}
// Layer ranges are half-open and tile [0, n_layer) in order; each stage listens on its
// endpoint; stage k dials stage k+1 and the final stage dials stage 0 for the direct
// return. A relative model path is relative to the topology file's folder.
#pragma once

#include "base/status.h"
#include "model/model.h"
#include "transport/socket.h"

#include <string>
#include <vector>

namespace skippy::transport {

struct stage_spec {
    layer_range layers;
    endpoint    address;
};

struct topology {
    std::string             model_path;
    std::vector<stage_spec> stages;

    // Parses JSON text; `base_dir` resolves a relative model path.
    static result<topology> parse(const std::string & json_text, const std::string & base_dir);
    static result<topology> load(const std::string & path);

    // The ranges tile [0, n_layer) in order, no stage is empty, endpoints differ.
    status validate(int32_t n_layer) const;

    std::string to_json() const;
    int32_t n_stages() const { return static_cast<int32_t>(stages.size()); }
};

// An even split of n_layer layers over n_stages stages (the first stages take the
// remainder), endpoints host:base_port+i.
result<topology> even_split(const std::string & model_path, int32_t n_layer, int32_t n_stages,
                            const std::string & host, uint16_t base_port);

}  // namespace skippy::transport
