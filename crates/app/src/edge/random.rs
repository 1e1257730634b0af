//! Random names and tokens from the kernel.

use std::io::Read;

/// 128 random bits from the kernel, as 32 lowercase hex digits (the dashboard's token, a worker's socket name).
///
/// # Errors
/// When `/dev/urandom` cannot be read.
pub fn hex128() -> std::io::Result<String> {
    let mut bytes = [0_u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
