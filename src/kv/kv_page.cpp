#include "kv/kv_page.h"

#include "base/byte_io.h"
#include "base/crc32c.h"

#include <openssl/evp.h>

#include <array>
#include <cstring>
#include <string>

namespace skippy {
namespace {

using sha256_bytes = std::array<uint8_t, kv_page_sha256_checksum_bytes>;

bool sha256(std::span<const uint8_t> data, sha256_bytes & out) {
    unsigned int n = 0;
    return EVP_Digest(data.data(), data.size(), out.data(), &n, EVP_sha256(), nullptr) == 1 &&
           n == kv_page_sha256_checksum_bytes;
}

size_t checksum_bytes_of(uint16_t version) {
    return version >= kv_page_version ? kv_page_checksum_bytes : kv_page_sha256_checksum_bytes;
}

size_t elem_bytes_of(kv_dtype dtype) { return dtype == kv_dtype::f16 ? 2 : 4; }

bool known_dtype(uint8_t v) { return v == static_cast<uint8_t>(kv_dtype::f32) || v == static_cast<uint8_t>(kv_dtype::f16); }

// Payload bytes for a geometry already checked against the kv_page_max_* limits:
// 4096 * 2 * 2^24 * 2^20 * 4 < 2^63, so the product cannot overflow.
uint64_t payload_bytes_of(const kv_page_geometry & g, int64_t token_count) {
    const uint64_t n_layers = static_cast<uint64_t>(g.kv_layers());
    const uint64_t row_bytes = static_cast<uint64_t>(g.kv_dim) * elem_bytes_of(g.dtype);
    return n_layers * 2 * static_cast<uint64_t>(token_count) * row_bytes;
}

bool geometry_in_limits(const kv_page_geometry & g) {
    return g.layer_start >= 0 && g.layer_end > g.layer_start && g.layer_end - g.layer_start <= kv_page_max_layers &&
           g.n_kv_layers >= 0 && g.n_kv_layers <= g.layer_end - g.layer_start && g.kv_dim > 0 && g.kv_dim <= kv_page_max_kv_dim;
}

std::string describe(const kv_page_geometry & g) {
    return "layers [" + std::to_string(g.layer_start) + "," + std::to_string(g.layer_end) + ") with " +
           std::to_string(g.kv_layers()) + " KV layers, kv_dim " + std::to_string(g.kv_dim) + " dtype " +
           (g.dtype == kv_dtype::f16 ? "f16" : "f32");
}

}  // namespace

size_t kv_page_bytes(const kv_page_geometry & geometry, int64_t token_count) {
    return kv_page_header_bytes + static_cast<size_t>(payload_bytes_of(geometry, token_count)) + kv_page_checksum_bytes;
}

result<std::vector<uint8_t>> export_page(const kv_sequence & seq, int32_t layer_start, int32_t layer_end,
                                         int64_t token_start, int64_t token_count) {
    const kv_geometry & pg = seq.pool().geometry();
    kv_page_geometry g{layer_start, layer_end, pg.kv_dim, pg.dtype, pg.n_layers};
    if (!geometry_in_limits(g) || pg.n_layers < 1) {
        return make_error(error_code::invalid_argument, "export_page: " + describe(g) + " does not match a pool of " +
                                                            std::to_string(pg.n_layers) + " layers");
    }
    if (token_start < 0 || token_count < 0 || token_start > kv_page_max_tokens - token_count ||
        token_start > seq.n_tokens() - token_count) {
        return make_error(error_code::invalid_argument, "export_page: tokens [" + std::to_string(token_start) + ", +" +
                                                            std::to_string(token_count) + ") outside the " +
                                                            std::to_string(seq.n_tokens()) + " held");
    }
    const uint64_t payload = payload_bytes_of(g, token_count);
    const size_t row_bytes = pg.row_bytes();

    std::vector<uint8_t> out;
    out.reserve(kv_page_header_bytes + static_cast<size_t>(payload) + kv_page_checksum_bytes);
    byte_writer w(out);
    w.put_bytes(kv_page_magic, sizeof(kv_page_magic));
    w.put_u16(kv_page_version);
    w.put_u16(kv_page_layout_layer_major);
    w.put_u8(static_cast<uint8_t>(g.dtype));
    w.put_zeros(3);
    w.put_i32(g.layer_start);
    w.put_i32(g.layer_end);
    w.put_i32(g.kv_dim);
    w.put_i32(g.n_kv_layers);
    w.put_i64(token_start);
    w.put_i64(token_count);
    w.put_u64(payload);
    for (int32_t il = 0; il < pg.n_layers; ++il) {
        for (int64_t p = token_start; p < token_start + token_count; ++p) w.put_bytes(seq.k_row(il, p), row_bytes);
        for (int64_t p = token_start; p < token_start + token_count; ++p) w.put_bytes(seq.v_row(il, p), row_bytes);
    }
    w.put_u32(crc32c(out));
    return out;
}

result<kv_page_header> validate_page(std::span<const uint8_t> page) {
    if (page.size() < kv_page_header_bytes + kv_page_checksum_bytes) {  // the shortest checksum
        return make_error(error_code::invalid_data, "KV page of " + std::to_string(page.size()) + " bytes is shorter than a header");
    }
    if (std::memcmp(page.data(), kv_page_magic, sizeof(kv_page_magic)) != 0) {
        return make_error(error_code::invalid_data, "KV page: bad magic");
    }
    byte_reader r(page.subspan(sizeof(kv_page_magic)));
    kv_page_header h;
    uint8_t dtype = 0;
    uint8_t r0 = 0, r1 = 0, r2 = 0;
    r.get_u16(h.version);
    r.get_u16(h.layout);
    r.get_u8(dtype);
    r.get_u8(r0), r.get_u8(r1), r.get_u8(r2);
    r.get_i32(h.geometry.layer_start);
    r.get_i32(h.geometry.layer_end);
    r.get_i32(h.geometry.kv_dim);
    r.get_i32(h.geometry.n_kv_layers);
    r.get_i64(h.token_start);
    r.get_i64(h.token_count);
    r.get_u64(h.payload_bytes);
    if (!r.ok()) return make_error(error_code::internal, "KV page: header read past a checked length");
    if (h.version != kv_page_version && h.version != kv_page_version_sha256 && h.version != kv_page_version_all_layers) {
        return make_error(error_code::unsupported, "KV page format version " + std::to_string(h.version) + " (this build reads " +
                                                       std::to_string(kv_page_version_all_layers) + " to " +
                                                       std::to_string(kv_page_version) + ")");
    }
    const size_t checksum_bytes = checksum_bytes_of(h.version);
    if (page.size() < kv_page_header_bytes + checksum_bytes) {
        return make_error(error_code::invalid_data, "KV page of " + std::to_string(page.size()) + " bytes is shorter than a header");
    }
    // Version 1 kept bytes 28..31 reserved (zero) and every layer of the range.
    int32_t reserved_v1 = 0;
    if (h.version == kv_page_version_all_layers) {
        reserved_v1 = h.geometry.n_kv_layers;
        h.geometry.n_kv_layers = h.geometry.layer_end - h.geometry.layer_start;
    }
    if (h.layout != kv_page_layout_layer_major) {
        return make_error(error_code::unsupported, "KV page layout " + std::to_string(h.layout));
    }
    if (!known_dtype(dtype)) return make_error(error_code::invalid_data, "KV page: unknown dtype " + std::to_string(dtype));
    h.geometry.dtype = static_cast<kv_dtype>(dtype);
    if (r0 != 0 || r1 != 0 || r2 != 0 || reserved_v1 != 0) return make_error(error_code::invalid_data, "KV page: reserved bytes not zero");
    if (!geometry_in_limits(h.geometry) || h.geometry.n_kv_layers < 1) {
        return make_error(error_code::invalid_data, "KV page: bad geometry " + describe(h.geometry));
    }
    if (h.token_start < 0 || h.token_count < 0 || h.token_start > kv_page_max_tokens - h.token_count) {
        return make_error(error_code::invalid_data, "KV page: bad token range start " + std::to_string(h.token_start) +
                                                        " count " + std::to_string(h.token_count));
    }
    const uint64_t payload = payload_bytes_of(h.geometry, h.token_count);
    if (h.payload_bytes != payload || page.size() - kv_page_header_bytes - checksum_bytes != payload) {
        return make_error(error_code::invalid_data, "KV page: payload of " + std::to_string(page.size()) +
                                                        " byte page does not match its header (" + std::to_string(payload) + " expected)");
    }
    const size_t body = page.size() - checksum_bytes;
    if (h.version >= kv_page_version) {
        uint32_t stored = 0;
        byte_reader(page.subspan(body)).get_u32(stored);
        if (stored != crc32c(page.first(body))) {
            return make_error(error_code::integrity, "KV page: checksum mismatch");
        }
        return h;
    }
    sha256_bytes sum{};
    if (!sha256(page.first(body), sum)) return make_error(error_code::internal, "KV page: SHA-256 failed");
    if (std::memcmp(sum.data(), page.data() + body, kv_page_sha256_checksum_bytes) != 0) {
        return make_error(error_code::integrity, "KV page: checksum mismatch");
    }
    return h;
}

status import_page(kv_sequence & seq, std::span<const uint8_t> page, const kv_page_geometry & expected) {
    SKIPPY_ASSIGN_OR_RETURN(kv_page_header h, validate_page(page));
    const kv_geometry & pg = seq.pool().geometry();
    const kv_page_geometry pool_g{expected.layer_start, expected.layer_end, pg.kv_dim, pg.dtype, pg.n_layers};
    if (!h.geometry.same_as(expected) || !expected.same_as(pool_g)) {
        return make_error(error_code::invalid_data, "KV page geometry " + describe(h.geometry) + " does not match " +
                                                        describe(expected) + " (pool " + describe(pool_g) + ")");
    }
    if (seq.n_tokens() != h.token_start) {
        return make_error(error_code::invalid_argument, "KV page starts at " + std::to_string(h.token_start) +
                                                            " but the session holds " + std::to_string(seq.n_tokens()));
    }
    SKIPPY_TRY(seq.prepare_write(h.token_start, h.token_count));
    const size_t row_bytes = pg.row_bytes();
    const uint8_t * src = page.data() + kv_page_header_bytes;
    for (int32_t il = 0; il < pg.n_layers; ++il) {
        for (int64_t p = h.token_start; p < h.token_start + h.token_count; ++p, src += row_bytes) {
            std::memcpy(seq.k_row(il, p), src, row_bytes);
        }
        for (int64_t p = h.token_start; p < h.token_start + h.token_count; ++p, src += row_bytes) {
            std::memcpy(seq.v_row(il, p), src, row_bytes);
        }
    }
    return status::ok();
}

}  // namespace skippy
