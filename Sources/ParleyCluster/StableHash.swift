/// A 64-bit hash that is the same in every process, on every machine, forever.
///
/// Swift's `Hasher` is seeded per process, so two nodes would disagree about where an actor lives.
/// This is FNV-1a over the UTF-8 bytes followed by MurmurHash3's 64-bit finalizer, which spreads
/// FNV's weak low bits over the whole word.
public enum StableHash {
    /// Hashes the UTF-8 bytes of `text`.
    public static func hash(_ text: String) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        return mix(hash)
    }

    /// MurmurHash3's `fmix64`: a bijection that makes every input bit affect every output bit.
    public static func mix(_ value: UInt64) -> UInt64 {
        var x = value
        x ^= x >> 33
        x &*= 0xff51_afd7_ed55_8ccd
        x ^= x >> 33
        x &*= 0xc4ce_b9fe_1a85_ec53
        x ^= x >> 33
        return x
    }
}
