// Explicit little-endian encoding helpers: every wire and file format goes through
// these, field by field, never through casts of packed structs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace skippy {

// Appends fixed-width little-endian values to a byte vector.
class byte_writer {
public:
    explicit byte_writer(std::vector<uint8_t> & out) : out_(out) {}

    void put_u8(uint8_t v) { out_.push_back(v); }
    void put_u16(uint16_t v) { put_le(v, 2); }
    void put_u32(uint32_t v) { put_le(v, 4); }
    void put_u64(uint64_t v) { put_le(v, 8); }
    void put_i32(int32_t v) { put_u32(static_cast<uint32_t>(v)); }
    void put_i64(int64_t v) { put_u64(static_cast<uint64_t>(v)); }
    void put_f32(float v) { uint32_t u; std::memcpy(&u, &v, 4); put_u32(u); }
    void put_f64(double v) { uint64_t u; std::memcpy(&u, &v, 8); put_u64(u); }
    void put_bytes(const void * data, size_t n) {
        const auto * p = static_cast<const uint8_t *>(data);
        out_.insert(out_.end(), p, p + n);
    }
    void put_zeros(size_t n) { out_.insert(out_.end(), n, 0); }
    size_t size() const { return out_.size(); }
    // Overwrites 4 bytes at `offset` (for length fields written after the body).
    void patch_u32(size_t offset, uint32_t v) {
        for (int i = 0; i < 4; ++i) out_[offset + i] = static_cast<uint8_t>(v >> (8 * i));
    }

private:
    void put_le(uint64_t v, int n) {
        for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    }
    std::vector<uint8_t> & out_;
};

// Reads fixed-width little-endian values from a bounded span. Every get checks the
// remaining length first; after the first failure the reader stays failed and all
// further gets return false, so a decoder can check once at the end of a group.
class byte_reader {
public:
    explicit byte_reader(std::span<const uint8_t> data) : data_(data) {}

    bool ok() const { return ok_; }
    size_t offset() const { return pos_; }
    size_t remaining() const { return ok_ ? data_.size() - pos_ : 0; }

    bool get_u8(uint8_t & v) { return get_le(v); }
    bool get_u16(uint16_t & v) { return get_le(v); }
    bool get_u32(uint32_t & v) { return get_le(v); }
    bool get_u64(uint64_t & v) { return get_le(v); }
    bool get_i32(int32_t & v) { uint32_t u = 0; bool r = get_le(u); v = static_cast<int32_t>(u); return r; }
    bool get_i64(int64_t & v) { uint64_t u = 0; bool r = get_le(u); v = static_cast<int64_t>(u); return r; }
    bool get_f32(float & v) { uint32_t u = 0; bool r = get_le(u); std::memcpy(&v, &u, 4); return r; }
    bool get_f64(double & v) { uint64_t u = 0; bool r = get_le(u); std::memcpy(&v, &u, 8); return r; }
    // A view of the next n bytes (valid while the underlying data lives).
    bool get_span(size_t n, std::span<const uint8_t> & v) {
        if (!need(n)) return false;
        v = data_.subspan(pos_, n);
        pos_ += n;
        return true;
    }
    bool skip(size_t n) { if (!need(n)) return false; pos_ += n; return true; }

private:
    bool need(size_t n) {
        if (!ok_ || data_.size() - pos_ < n) { ok_ = false; return false; }
        return true;
    }
    template <typename T>
    bool get_le(T & v) {
        if (!need(sizeof(T))) { v = 0; return false; }
        uint64_t acc = 0;
        for (size_t i = 0; i < sizeof(T); ++i) acc |= static_cast<uint64_t>(data_[pos_ + i]) << (8 * i);
        v = static_cast<T>(acc);
        pos_ += sizeof(T);
        return true;
    }
    std::span<const uint8_t> data_;
    size_t pos_ = 0;
    bool ok_ = true;
};

// Little-endian loads and stores on raw memory (for block layouts inside tensors).
inline uint16_t load_u16_le(const uint8_t * p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t load_u32_le(const uint8_t * p) {
    return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
           (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
inline void store_u16_le(uint8_t * p, uint16_t v) { p[0] = static_cast<uint8_t>(v); p[1] = static_cast<uint8_t>(v >> 8); }
inline void store_u32_le(uint8_t * p, uint32_t v) { for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i)); }

}  // namespace skippy
