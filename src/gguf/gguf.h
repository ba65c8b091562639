// GGUF files: a validating, memory-mapped reader and a writer.
//
// Format (versions 2 and 3, little-endian): magic "GGUF", u32 version, u64 tensor
// count, u64 metadata count, metadata key/value pairs, tensor infos, padding to
// `general.alignment` (default 32), then the tensor data section. See docs/gguf.md.
//
// The reader trusts nothing: every count, length, offset, size and type is checked
// against the file before use, and the memory the parsed metadata and tensor table
// take is budgeted (open_options), so a truncated or hostile file yields a status,
// never a crash or an allocation beyond that budget.
#pragma once

#include "base/status.h"
#include "base/tensor_type.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace skippy::gguf {

enum class value_type : uint32_t {
    u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
    string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};

std::string_view value_type_name(value_type t);

// One metadata value. Scalars keep their declared type; integers of every width are
// readable through as_int (range-checked), floats through as_float.
class value {
public:
    value() = default;
    static value make_u32(uint32_t v) { return make_int(value_type::u32, v); }
    static value make_i32(int32_t v) { return make_int(value_type::i32, v); }
    static value make_u64(uint64_t v) { value r; r.type_ = value_type::u64; r.uint_ = v; r.int_ = static_cast<int64_t>(v); return r; }
    static value make_int(value_type t, int64_t v);
    static value make_f32(float v) { value r; r.type_ = value_type::f32; r.float_ = v; return r; }
    static value make_f64(double v) { value r; r.type_ = value_type::f64; r.float_ = v; return r; }
    static value make_bool(bool v) { value r; r.type_ = value_type::boolean; r.int_ = v; return r; }
    static value make_string(std::string v) { value r; r.type_ = value_type::string; r.string_ = std::move(v); return r; }
    static value make_array(value_type elem_type, std::vector<value> elems);
    static value make_string_array(std::vector<std::string> v);
    static value make_f32_array(const std::vector<float> & v);
    static value make_i32_array(const std::vector<int32_t> & v);

    value_type type() const { return type_; }
    bool is_integer() const;

    // Integer value if this is an integer (any width) that fits in [lo, hi].
    std::optional<int64_t> as_int(int64_t lo = INT64_MIN, int64_t hi = INT64_MAX) const;
    // u64 values above INT64_MAX are only readable here.
    std::optional<uint64_t> as_u64() const;
    std::optional<double> as_float() const;  // f32 or f64 (integers are not converted)
    std::optional<bool> as_bool() const;
    const std::string * as_string() const { return type_ == value_type::string ? &string_ : nullptr; }

    // Arrays: element type and elements (each a scalar value, or a nested array).
    value_type array_type() const { return array_type_; }
    const std::vector<value> * as_array() const { return type_ == value_type::array ? &array_ : nullptr; }

private:
    value_type         type_ = value_type::u8;
    int64_t            int_ = 0;
    uint64_t           uint_ = 0;
    double             float_ = 0;
    std::string        string_;
    value_type         array_type_ = value_type::u8;
    std::vector<value> array_;
};

struct tensor_info {
    std::string          name;
    std::vector<int64_t> dims;       // dims[0] is the row length (ggml's ne[0])
    tensor_type          type = tensor_type::f32;
    uint64_t             offset = 0; // from the start of the data section
    size_t               n_bytes = 0;
    const uint8_t *      data = nullptr;  // into the mapped file

    int64_t n_elements() const;
    int64_t n_rows() const { return dims.empty() ? 0 : n_elements() / dims[0]; }
};

// The layer of a block tensor, named blk.<il>.<rest> (<il> decimal digits, <rest> not
// empty); -1 for any other name.
int32_t block_index(std::string_view tensor_name);

struct open_options {
    // Largest string or array length accepted, in elements (bounded by file size anyway).
    uint64_t max_array_elements = uint64_t(1) << 28;
    // Memory the parsed metadata and tensor infos may take: `metadata_bytes_per_file_byte`
    // times the file's size, but at least `min_metadata_bytes` and at most
    // `max_metadata_bytes`. A parsed element costs more than its encoding (a one-byte
    // array element is a whole `value`), so without this a small hostile file could ask
    // for a hundred times its size; vocabulary-only files need 7x to 14x (SPM ones the
    // most), model files about 1x. Beyond the budget the file is refused.
    uint64_t metadata_bytes_per_file_byte = 32;
    uint64_t min_metadata_bytes = uint64_t(64) << 20;
    uint64_t max_metadata_bytes = uint64_t(1) << 30;
};

class file {
public:
    ~file();
    file(const file &) = delete;
    file & operator=(const file &) = delete;

    // Maps and validates a GGUF file.
    static result<std::unique_ptr<file>> open(const std::string & path, const open_options & opts = {});
    // Validates a GGUF image held in memory (tests, fuzzing). The bytes are copied.
    static result<std::unique_ptr<file>> from_bytes(std::span<const uint8_t> bytes, const open_options & opts = {});

    uint32_t version() const { return version_; }
    size_t alignment() const { return alignment_; }
    size_t data_offset() const { return data_offset_; }
    size_t size_bytes() const { return size_; }
    const std::string & path() const { return path_; }

    // Metadata in file order.
    const std::vector<std::pair<std::string, value>> & metadata() const { return metadata_; }
    const value * find(std::string_view key) const;

    // Typed lookups: nullopt when the key is absent or holds another type.
    std::optional<std::string> get_string(std::string_view key) const;
    std::optional<int64_t> get_int(std::string_view key) const;
    std::optional<double> get_float(std::string_view key) const;
    std::optional<bool> get_bool(std::string_view key) const;

    const std::vector<tensor_info> & tensors() const { return tensors_; }
    const tensor_info * find_tensor(std::string_view name) const;

    // Bytes [offset, offset + n_bytes) of the file.
    struct byte_range {
        uint64_t offset = 0;
        uint64_t n_bytes = 0;
    };
    // Puts the ranges (rounded out to 2 MiB) on anonymous memory advised for transparent
    // huge pages, at the same addresses and with the same bytes: every pointer into the
    // file stays valid. Decode streams each weight once per token, and on the file
    // mapping's 4 KiB pages it pays a TLB miss every few rows and loses the hardware
    // prefetcher at every page boundary (bench-200m, one core: 20-27% faster decode).
    // The bytes are copied from the file (pread) into fresh memory, which then replaces
    // the mapping in one mremap; when any step fails the range keeps the file mapping.
    // Returns the bytes now on such memory by this call (0 for a file from bytes, or when
    // the kernel's transparent huge pages are off). Ranges outside the file are clipped;
    // ranges already moved are skipped. Thread-safe; the content never changes, so
    // readers need no lock.
    result<uint64_t> back_with_huge_pages(std::span<const byte_range> ranges) const;

private:
    file() = default;
    status parse(const open_options & opts);

    std::string                                  path_;
    const uint8_t *                              base_ = nullptr;
    size_t                                       size_ = 0;
    bool                                         mapped_ = false;
    void *                                       reserved_ = nullptr;  // the 2 MiB-aligned reservation the mapping sits in
    size_t                                       reserved_bytes_ = 0;
    int                                          fd_ = -1;             // for back_with_huge_pages
    mutable std::mutex                           huge_mutex_;
    mutable std::vector<bool>                    huge_chunks_;         // 2 MiB chunks already moved
    std::vector<uint8_t>                         owned_;  // from_bytes only
    uint32_t                                     version_ = 0;
    size_t                                       alignment_ = 32;
    size_t                                       data_offset_ = 0;
    std::vector<std::pair<std::string, value>>   metadata_;
    std::map<std::string, size_t, std::less<>>   metadata_index_;
    std::vector<tensor_info>                     tensors_;
    std::map<std::string, size_t, std::less<>>   tensor_index_;
};

// Builds a GGUF file (version 3). Tensor data is held in memory until written.
class writer {
public:
    explicit writer(size_t alignment = 32) : alignment_(alignment) {}

    // Sets (or replaces) a metadata key; keys are written in first-set order.
    void set(const std::string & key, value v);

    // REQUIRES: data.size() == row_bytes(type, dims[0]) * (product of other dims).
    void add_tensor(const std::string & name, std::vector<int64_t> dims, tensor_type type, std::vector<uint8_t> data);

    std::vector<uint8_t> to_bytes() const;
    // Writes to `path` via a temporary file and an atomic rename.
    status write_file(const std::string & path) const;

private:
    struct pending_tensor {
        std::string          name;
        std::vector<int64_t> dims;
        tensor_type          type;
        std::vector<uint8_t> data;
    };
    size_t                                     alignment_;
    std::vector<std::pair<std::string, value>> metadata_;
    std::vector<pending_tensor>                tensors_;
};

}  // namespace skippy::gguf
