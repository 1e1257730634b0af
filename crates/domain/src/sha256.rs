//! SHA-256 digests (identities, spec fingerprints, shared-container keys) and HMACs (the runner's challenge) through
//! the maintained `sha2` and `hmac` crates.

use sha2::{Digest as _, Sha256};

/// Returns the SHA-256 digest of `data`.
pub fn digest(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// Returns the SHA-256 digest of `data` as 64 lowercase hex digits.
pub fn hex_digest(data: &[u8]) -> String {
    hex(&digest(data))
}

/// HMAC-SHA256 of `data` under `key`, as 64 lowercase hex digits.
pub fn hmac_hex(key: &[u8], data: &[u8]) -> String {
    use hmac::{KeyInit as _, Mac as _};
    // HMAC takes a key of any length.
    let Ok(mut mac) = hmac::Hmac::<Sha256>::new_from_slice(key) else { return String::new() };
    mac.update(data);
    hex(&mac.finalize().into_bytes())
}

fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    bytes.iter().flat_map(|b| [HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]).map(char::from).collect()
}

#[cfg(test)]
mod tests {
    use super::{hex_digest, hmac_hex};

    #[test]
    fn known_vectors() {
        assert_eq!(hex_digest(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(hex_digest(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        // RFC 4231, test case 2.
        assert_eq!(
            hmac_hex(b"Jefe", b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
