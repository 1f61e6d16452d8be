// libferrite from C++: RAII wrappers over the C API (std::unique_ptr with deleters, small owning
// classes for the buffers and lists), errors as exceptions, and asynchronous puts and gets.
//
//   c++ -std=c++17 basic.cpp $(pkg-config --cflags --libs ferrite) -o basic_cpp && ./basic_cpp
//
// The server address comes from the first argument, else FERRITE_ADDR, else 127.0.0.1:11911.

#include <ferrite.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ferrite {

// A failed call: the status, and the library's message for it.
class error : public std::runtime_error {
public:
    error(ferrite_status status, const std::string &what)
        : std::runtime_error(what + ": " + ferrite_status_name(status) + ": " + ferrite_last_error()),
          status_(status) {}
    ferrite_status status() const noexcept { return status_; }

private:
    ferrite_status status_;
};

inline void check(ferrite_status status, const char *what) {
    if (status != FERRITE_OK) throw error(status, what);
}

// Each handle type is released by its one function, whatever path leaves the scope.
struct session_closer {
    void operator()(ferrite_session *session) const noexcept { ferrite_session_close(session); }
};
struct pool_closer {
    void operator()(ferrite_pool *pool) const noexcept { ferrite_pool_close(pool); }
};
struct op_freer {
    void operator()(ferrite_op *op) const noexcept { ferrite_op_free(op); }
};
using session = std::unique_ptr<ferrite_session, session_closer>;
using pool = std::unique_ptr<ferrite_pool, pool_closer>;
using op = std::unique_ptr<ferrite_op, op_freer>;

// A value the library allocated, freed when this object goes.
class buffer {
public:
    buffer() = default;
    buffer(const buffer &) = delete;
    buffer &operator=(const buffer &) = delete;
    ~buffer() { ferrite_buffer_free(&raw_); }
    // For an out-parameter: drops what was held, hands out the empty struct.
    ferrite_buffer *out() {
        ferrite_buffer_free(&raw_);
        return &raw_;
    }
    std::string str() const { return raw_.len ? std::string(reinterpret_cast<const char *>(raw_.data), raw_.len) : ""; }

private:
    ferrite_buffer raw_{};
};

inline const uint8_t *bytes(std::string_view text) { return reinterpret_cast<const uint8_t *>(text.data()); }

inline session connect(const std::string &address, const ferrite_options *options = nullptr) {
    ferrite_session *raw = nullptr;
    check(ferrite_connect(address.c_str(), options, &raw), "connect");
    return session(raw);
}

inline pool create_pool(const session &s, const std::string &name, uint64_t size_bytes, uint32_t flags = 0) {
    ferrite_pool *raw = nullptr;
    check(ferrite_pool_create(s.get(), name.c_str(), size_bytes, 0, flags, nullptr, &raw), "create pool");
    return pool(raw);
}

inline void put(const pool &p, std::string_view key, std::string_view value) {
    check(ferrite_put(p.get(), bytes(key), key.size(), bytes(value), value.size(), 0), "put");
}

inline std::string get(const pool &p, std::string_view key) {
    buffer value;
    check(ferrite_get(p.get(), bytes(key), key.size(), value.out()), "get");
    return value.str();
}

inline std::vector<std::string> find(const pool &p, ferrite_find_kind kind, std::string_view pattern) {
    ferrite_key_list keys{};
    check(ferrite_find(p.get(), kind, bytes(pattern), pattern.size(), &keys), "find");
    std::vector<std::string> result;
    for (size_t i = 0; i < keys.len; i++) {
        result.emplace_back(reinterpret_cast<const char *>(keys.keys[i].data), keys.keys[i].len);
    }
    ferrite_key_list_free(&keys);
    return result;
}

inline op put_async(const pool &p, std::string_view key, std::string_view value) {
    ferrite_op *raw = nullptr;
    check(ferrite_put_async(p.get(), bytes(key), key.size(), bytes(value), value.size(), 0, &raw), "put_async");
    return op(raw);
}

inline op get_async(const pool &p, std::string_view key) {
    ferrite_op *raw = nullptr;
    check(ferrite_get_async(p.get(), bytes(key), key.size(), &raw), "get_async");
    return op(raw);
}

}  // namespace ferrite

int main(int argc, char **argv) {
    const char *env = std::getenv("FERRITE_ADDR");
    std::string address = argc > 1 ? argv[1] : env != nullptr ? env : "127.0.0.1:11911";
    const std::string name = "example-cpp";
    try {
        ferrite_options options = FERRITE_OPTIONS_INIT;
        options.client_name = "examples/c/basic.cpp";
        ferrite::session session = ferrite::connect(address, &options);
        {
            ferrite::pool pool = ferrite::create_pool(session, name, FERRITE_POOL_SIZE_DEFAULT);
            ferrite::put(pool, "greeting", "hello from C++");
            std::cout << "greeting = " << ferrite::get(pool, "greeting") << "\n";

            // A hundred puts in flight at once on one connection, then a hundred gets.
            std::vector<ferrite::op> ops;
            for (int i = 0; i < 100; i++) {
                ops.push_back(ferrite::put_async(pool, "item:" + std::to_string(i), std::to_string(i * i)));
            }
            for (auto &op : ops) ferrite::check(ferrite_op_wait(op.get(), FERRITE_WAIT_FOREVER), "put");
            ops.clear();
            for (int i = 0; i < 100; i++) ops.push_back(ferrite::get_async(pool, "item:" + std::to_string(i)));
            long long sum = 0;
            for (auto &op : ops) {
                ferrite::check(ferrite_op_wait(op.get(), FERRITE_WAIT_FOREVER), "get");
                ferrite::buffer value;
                ferrite::check(ferrite_op_result_buffer(op.get(), value.out()), "result");
                sum += std::stoll(value.str());
            }
            std::cout << "sum of the squares below 100 = " << sum << "\n";

            auto keys = ferrite::find(pool, FERRITE_FIND_REGEX, "^item:9[0-9]$");
            std::cout << keys.size() << " keys match ^item:9[0-9]$:";
            for (const auto &key : keys) std::cout << " " << key;
            std::cout << "\n";

            try {
                ferrite::get(pool, "absent");
            } catch (const ferrite::error &e) {
                std::cout << "get absent: " << ferrite_status_name(e.status()) << "\n";
            }
        }  // the pool closes here, so it may be deleted
        ferrite::check(ferrite_pool_delete(session.get(), name.c_str()), "delete pool");
    } catch (const ferrite::error &e) {
        std::cerr << e.what() << "\n";
        return 1;
    }
    return 0;
}
