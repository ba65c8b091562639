#include "cache/page_record.h"

#include "base/byte_io.h"

#include <cstring>

namespace skippy::cache {
namespace {

constexpr char k_magic[8] = {'S', 'K', 'P', 'Y', 'P', 'R', 'E', 'C'};

}  // namespace

std::vector<uint8_t> encode_page_record_header(const page_record_header & h) {
    std::vector<uint8_t> out;
    out.reserve(page_record_header_bytes);
    byte_writer w(out);
    w.put_bytes(k_magic, sizeof(k_magic));
    w.put_u16(page_record_version);
    w.put_zeros(6);
    w.put_bytes(h.ns.bytes.data(), 32);
    w.put_bytes(h.key.bytes.data(), 32);
    w.put_i64(h.token_start);
    w.put_i64(h.token_count);
    w.put_u64(h.payload_bytes);
    return out;
}

std::vector<uint8_t> encode_page_record(const page_record_header & h, std::span<const uint8_t> payload) {
    page_record_header with_length = h;
    with_length.payload_bytes = payload.size();
    std::vector<uint8_t> out = encode_page_record_header(with_length);
    out.reserve(page_record_overhead_bytes + payload.size());
    byte_writer w(out);
    w.put_bytes(payload.data(), payload.size());
    const digest256 sum = sha256(out);
    w.put_bytes(sum.bytes.data(), 32);
    return out;
}

result<page_record_header> decode_page_record_header(std::span<const uint8_t> bytes, uint64_t total_bytes) {
    auto bad = [](const char * what) { return make_error(error_code::invalid_data, std::string("page record: ") + what); };
    if (bytes.size() < page_record_header_bytes) return bad("shorter than its header");
    if (std::memcmp(bytes.data(), k_magic, sizeof(k_magic)) != 0) return bad("bad magic");
    byte_reader r(bytes.subspan(8, page_record_header_bytes - 8));
    page_record_header h;
    uint16_t version = 0, reserved16 = 0;
    uint32_t reserved32 = 0;
    r.get_u16(version);
    r.get_u16(reserved16);
    r.get_u32(reserved32);
    std::span<const uint8_t> ns, key;
    r.get_span(32, ns);
    r.get_span(32, key);
    r.get_i64(h.token_start);
    r.get_i64(h.token_count);
    r.get_u64(h.payload_bytes);
    if (!r.ok()) return bad("truncated header");
    if (version != page_record_version) {
        return make_error(error_code::unsupported, "page record: version " + std::to_string(version));
    }
    if (reserved16 != 0 || reserved32 != 0) return bad("reserved bytes set");
    std::memcpy(h.ns.bytes.data(), ns.data(), 32);
    std::memcpy(h.key.bytes.data(), key.data(), 32);
    if (h.token_start < 0 || h.token_count <= 0 || h.token_start > page_record_max_tokens || h.token_count > page_record_max_tokens - h.token_start) {
        return bad("token range out of bounds");
    }
    if (h.payload_bytes == 0 || h.payload_bytes > page_record_max_payload_bytes) return bad("payload length out of bounds");
    if (total_bytes != page_record_overhead_bytes + h.payload_bytes) return bad("length does not match the payload");
    return h;
}

result<std::span<const uint8_t>> verify_page_record(std::span<const uint8_t> bytes, const digest256 & ns,
                                                    const digest256 & key, int64_t token_start, int64_t token_count) {
    SKIPPY_ASSIGN_OR_RETURN(page_record_header h, decode_page_record_header(bytes, bytes.size()));
    if (h.ns != ns) return make_error(error_code::invalid_data, "page record of another namespace");
    if (h.key != key) return make_error(error_code::invalid_data, "page record of another prefix");
    if (h.token_start != token_start || h.token_count != token_count) {
        return make_error(error_code::invalid_data, "page record of another token range");
    }
    const size_t body = bytes.size() - 32;
    const digest256 sum = sha256(bytes.first(body));
    if (std::memcmp(sum.bytes.data(), bytes.data() + body, 32) != 0) {
        return make_error(error_code::integrity, "page record checksum mismatch");
    }
    return bytes.subspan(page_record_header_bytes, static_cast<size_t>(h.payload_bytes));
}

}  // namespace skippy::cache
