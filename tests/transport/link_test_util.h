// Small helpers shared by the link tests.
#pragma once

#include "protocol/protocol.h"

#include <cstdint>
#include <string>

namespace skippy::transport::test_util {

// A stage key long enough for load_stage_key.
inline const std::string k_key = "0123456789abcdef0123456789abcdef";

// A valid Stop request: the shortest frame that goes downstream.
inline protocol::request stop_request(uint64_t id) {
    protocol::request r;
    r.kind = protocol::message_kind::stop;
    r.request_id = id;
    r.state.phase = protocol::message_phase::control;
    return r;
}

}  // namespace skippy::transport::test_util
