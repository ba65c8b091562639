#include "model/recurrent_snapshot.h"

#include "base/byte_io.h"
#include "base/crc32c.h"

#include <openssl/evp.h>

#include <bit>
#include <cstring>
#include <string>

namespace skippy {
namespace {

// The payload is the state's floats as they lie in memory.
static_assert(std::endian::native == std::endian::little, "snapshots are written as little-endian f32");

using snapshot_sha256_bytes = std::array<uint8_t, recurrent_snapshot_sha256_checksum_bytes>;

bool snapshot_sha256(std::span<const uint8_t> data, snapshot_sha256_bytes & out) {
    unsigned int n = 0;
    return EVP_Digest(data.data(), data.size(), out.data(), &n, EVP_sha256(), nullptr) == 1 &&
           n == recurrent_snapshot_sha256_checksum_bytes;
}

// Within these, every product below fits in 63 bits: 4096 layers x 4 bytes x
// (63 x 2^20 + 4096 x 1024^2) < 2^63.
bool snapshot_shape_in_limits(const recurrent_shape & s) {
    return s.layer_start >= 0 && s.layer_end > s.layer_start && s.layer_end - s.layer_start <= recurrent_snapshot_max_layers &&
           s.n_layers >= 1 && s.n_layers <= s.layer_end - s.layer_start && s.d_conv >= 1 && s.d_conv <= 64 &&
           s.conv_channels >= 1 && s.conv_channels <= (1 << 20) && s.d_state >= 1 && s.d_state <= 1024 && s.n_v_head >= 1 &&
           s.n_v_head <= 4096;
}

uint64_t snapshot_payload_bytes(const recurrent_shape & s) {
    return static_cast<uint64_t>(s.floats()) * sizeof(float);
}

std::string describe_shape(const recurrent_shape & s) {
    return "layers [" + std::to_string(s.layer_start) + "," + std::to_string(s.layer_end) + ") with " +
           std::to_string(s.n_layers) + " recurrent, d_conv " + std::to_string(s.d_conv) + ", " +
           std::to_string(s.conv_channels) + " channels, d_state " + std::to_string(s.d_state) + ", " +
           std::to_string(s.n_v_head) + " v heads";
}

}  // namespace

size_t recurrent_snapshot_bytes(const recurrent_shape & shape) {
    return recurrent_snapshot_header_bytes + static_cast<size_t>(snapshot_payload_bytes(shape)) + recurrent_snapshot_checksum_bytes;
}

result<std::vector<uint8_t>> encode_recurrent_snapshot(const recurrent_state & state, const recurrent_shape & shape,
                                                        const snapshot_namespace & ns) {
    if (!snapshot_shape_in_limits(shape) || !state.has_shape(shape)) {
        return make_error(error_code::invalid_argument, "recurrent snapshot: the state does not have the shape " + describe_shape(shape));
    }
    if (state.n_tokens() < 0 || state.n_tokens() > recurrent_snapshot_max_tokens) {
        return make_error(error_code::invalid_argument, "recurrent snapshot: the state holds no valid prefix");
    }
    const uint64_t payload = snapshot_payload_bytes(shape);
    std::vector<uint8_t> out;
    out.reserve(recurrent_snapshot_bytes(shape));
    byte_writer w(out);
    w.put_bytes(recurrent_snapshot_magic, sizeof(recurrent_snapshot_magic));
    w.put_u16(recurrent_snapshot_version);
    w.put_u16(recurrent_snapshot_dtype_f32);
    w.put_zeros(4);
    w.put_bytes(ns.data(), ns.size());
    w.put_i32(shape.layer_start);
    w.put_i32(shape.layer_end);
    w.put_i32(shape.n_layers);
    w.put_i32(shape.d_conv);
    w.put_i32(shape.conv_channels);
    w.put_i32(shape.d_state);
    w.put_i32(shape.n_v_head);
    w.put_zeros(4);
    w.put_i64(state.n_tokens());
    w.put_u64(payload);
    const std::span<const float> floats = state.floats();
    w.put_bytes(floats.data(), floats.size_bytes());
    w.put_u32(crc32c(out));
    return out;
}

result<recurrent_snapshot_header> validate_recurrent_snapshot(std::span<const uint8_t> bytes) {
    if (bytes.size() < recurrent_snapshot_header_bytes + recurrent_snapshot_checksum_bytes) {  // the shortest checksum
        return make_error(error_code::invalid_data, "recurrent snapshot of " + std::to_string(bytes.size()) +
                                                        " bytes is shorter than a header");
    }
    if (std::memcmp(bytes.data(), recurrent_snapshot_magic, sizeof(recurrent_snapshot_magic)) != 0) {
        return make_error(error_code::invalid_data, "recurrent snapshot: bad magic");
    }
    byte_reader r(bytes.subspan(sizeof(recurrent_snapshot_magic)));
    recurrent_snapshot_header h;
    uint16_t dtype = 0;
    uint32_t reserved_a = 0, reserved_b = 0;
    std::span<const uint8_t> ns;
    r.get_u16(h.version);
    r.get_u16(dtype);
    r.get_u32(reserved_a);
    r.get_span(h.ns.size(), ns);
    r.get_i32(h.shape.layer_start);
    r.get_i32(h.shape.layer_end);
    r.get_i32(h.shape.n_layers);
    r.get_i32(h.shape.d_conv);
    r.get_i32(h.shape.conv_channels);
    r.get_i32(h.shape.d_state);
    r.get_i32(h.shape.n_v_head);
    r.get_u32(reserved_b);
    r.get_i64(h.n_tokens);
    r.get_u64(h.payload_bytes);
    if (!r.ok()) return make_error(error_code::internal, "recurrent snapshot: header read past a checked length");
    std::memcpy(h.ns.data(), ns.data(), h.ns.size());
    if (h.version != recurrent_snapshot_version && h.version != recurrent_snapshot_version_sha256) {
        return make_error(error_code::unsupported, "recurrent snapshot format version " + std::to_string(h.version) +
                                                       " (this build reads " + std::to_string(recurrent_snapshot_version_sha256) +
                                                       " and " + std::to_string(recurrent_snapshot_version) + ")");
    }
    const size_t checksum_bytes = h.version == recurrent_snapshot_version ? recurrent_snapshot_checksum_bytes
                                                                          : recurrent_snapshot_sha256_checksum_bytes;
    if (bytes.size() < recurrent_snapshot_header_bytes + checksum_bytes) {
        return make_error(error_code::invalid_data, "recurrent snapshot of " + std::to_string(bytes.size()) +
                                                        " bytes is shorter than a header");
    }
    if (dtype != recurrent_snapshot_dtype_f32) {
        return make_error(error_code::unsupported, "recurrent snapshot: dtype " + std::to_string(dtype) + " (only f32, 0)");
    }
    if (reserved_a != 0 || reserved_b != 0) return make_error(error_code::invalid_data, "recurrent snapshot: reserved bytes not zero");
    if (!snapshot_shape_in_limits(h.shape)) return make_error(error_code::invalid_data, "recurrent snapshot: bad shape " + describe_shape(h.shape));
    if (h.n_tokens < 0 || h.n_tokens > recurrent_snapshot_max_tokens) {
        return make_error(error_code::invalid_data, "recurrent snapshot: bad token count " + std::to_string(h.n_tokens));
    }
    const uint64_t payload = snapshot_payload_bytes(h.shape);
    if (h.payload_bytes != payload ||
        bytes.size() - recurrent_snapshot_header_bytes - checksum_bytes != payload) {
        return make_error(error_code::invalid_data, "recurrent snapshot: payload of " + std::to_string(bytes.size()) +
                                                        " byte snapshot does not match its header (" + std::to_string(payload) +
                                                        " expected)");
    }
    const size_t body = bytes.size() - checksum_bytes;
    if (h.version == recurrent_snapshot_version) {
        uint32_t stored = 0;
        byte_reader(bytes.subspan(body)).get_u32(stored);
        if (stored != crc32c(bytes.first(body))) return make_error(error_code::integrity, "recurrent snapshot: checksum mismatch");
        return h;
    }
    snapshot_sha256_bytes sum{};
    if (!snapshot_sha256(bytes.first(body), sum)) return make_error(error_code::internal, "recurrent snapshot: SHA-256 failed");
    if (std::memcmp(sum.data(), bytes.data() + body, recurrent_snapshot_sha256_checksum_bytes) != 0) {
        return make_error(error_code::integrity, "recurrent snapshot: checksum mismatch");
    }
    return h;
}

status decode_recurrent_snapshot(std::span<const uint8_t> bytes, const recurrent_shape & shape, const snapshot_namespace & ns,
                                 int64_t n_tokens, recurrent_state & out) {
    SKIPPY_ASSIGN_OR_RETURN(recurrent_snapshot_header h, validate_recurrent_snapshot(bytes));
    if (h.ns != ns) return make_error(error_code::invalid_data, "recurrent snapshot: another namespace's");
    if (!(h.shape == shape)) {
        return make_error(error_code::invalid_data, "recurrent snapshot of " + describe_shape(h.shape) + ", this stage has " + describe_shape(shape));
    }
    if (n_tokens >= 0 && h.n_tokens != n_tokens) {
        return make_error(error_code::invalid_data, "recurrent snapshot after " + std::to_string(h.n_tokens) + " positions, expected " +
                                                        std::to_string(n_tokens));
    }
    // Into `out`'s own buffer when it has the shape (a lane's state: no allocation of
    // megabytes on a restore), else into a new one.
    if (!out.has_shape(shape)) out = recurrent_state(shape.n_layers, shape.conv_floats(), shape.matrix_floats());
    std::memcpy(out.floats().data(), bytes.data() + recurrent_snapshot_header_bytes, static_cast<size_t>(h.payload_bytes));
    out.set_n_tokens(h.n_tokens);
    return status::ok();
}

}  // namespace skippy
