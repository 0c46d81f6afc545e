//! Signatures: ed25519 over a SHA-256 content hash of a bundle's manifest and module.
//!
//! The content hash is SHA-256 of `trellis-plugin-v1\n`, then for the manifest and then the
//! module: its length as 8 bytes little-endian and its bytes. (The lengths keep a byte
//! moved from one part to the other from giving the same hash.) A signature is the
//! ed25519 signature of those 32 bytes; `signature.json` in the bundle holds the signer's
//! public key and the signature, both in hex:
//!
//! ```json
//! {"public_key": "3b6a27bc…", "signature": "9f0e…"}
//! ```
//!
//! Keys are files of 64 hex digits: the secret key (`NAME.key`, readable by you only) and
//! the public key (`NAME.key.pub`), written by `trellis plugin keygen`.

use std::path::{Path, PathBuf};

use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What the content hash starts with: the format's name and version.
const DOMAIN: &[u8] = b"trellis-plugin-v1\n";

/// The SHA-256 content hash of a manifest and a module (see the module docs).
pub fn content_hash(manifest: &[u8], module: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(DOMAIN);
    for part in [manifest, module] {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher.finalize().into()
}

/// A bundle's signature: `signature.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signature {
    /// The signer's public key, hex.
    pub public_key: String,
    /// The ed25519 signature of the content hash, hex.
    pub signature: String,
}

/// Why a key or a signature was refused.
#[derive(Debug, thiserror::Error)]
pub enum SigningError {
    /// A key is not 64 hex digits of a valid key.
    #[error("{0} is not an ed25519 key (64 hex digits)")]
    BadKey(String),
    /// A key file cannot be read or written.
    #[error("cannot {action} the key file {path}: {source}")]
    KeyFile {
        /// read or write.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A key file that is not a regular file of a few bytes (a directory, a pipe, a
    /// device, something large).
    #[error("{path} is not a key file: keys are small files of 64 hex digits, as you get when you {keygen}", keygen = crate::actions::GENERATE_KEYS)]
    NotAKeyFile {
        /// What was given.
        path: PathBuf,
    },
    /// A secret key file was given where a public key belongs.
    #[error("{path} is a secret key (its public key is in {path}.pub): give {path}.pub instead, and keep {path} to yourself")]
    SecretKeyGiven {
        /// The secret key file.
        path: PathBuf,
    },
    /// A public key file was given where the secret key belongs.
    #[error("{path} is a public key file; sign with the secret key file beside it, which you got when you {keygen}", keygen = crate::actions::GENERATE_KEYS)]
    PublicKeyGiven {
        /// The public key file.
        path: PathBuf,
    },
    /// No random bytes for a key.
    #[error("cannot make a key: no random bytes from the system: {0}")]
    Random(String),
    /// The signature does not match the bundle.
    #[error(
        "the bundle's signature does not match its content: it changed after it was signed (or the signature is not \
         for it); do not install it, and ask its author for a fresh copy"
    )]
    Tampered,
    /// The signer is not trusted.
    #[error(
        "the bundle is signed by {0}, which is not among your trusted keys; if you trust its author, run `trellis \
         plugin trust {0}` first"
    )]
    Untrusted(String),
    /// No signature, and unsigned bundles were not allowed.
    #[error(
        "the bundle is not signed; install it with --allow-unsigned to run it anyway (it is then listed as unsigned)"
    )]
    Unsigned,
}

/// An ed25519 public key, shown as 64 hex digits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey(VerifyingKey);

impl PublicKey {
    /// Reads 64 hex digits (surrounding white space ignored).
    pub fn parse(text: &str) -> Result<PublicKey, SigningError> {
        let shown = || format!("{:?}", text.trim().chars().take(80).collect::<String>());
        let bytes: [u8; 32] = decode_hex(text.trim()).ok_or_else(|| SigningError::BadKey(shown()))?;
        VerifyingKey::from_bytes(&bytes).map(PublicKey).map_err(|_| SigningError::BadKey(shown()))
    }

    /// Reads a public key file (64 hex digits). Refuses a secret key file, which holds 64
    /// hex digits too: `keygen` writes the secret key to FILE and its public key to
    /// FILE.pub, so a file whose FILE.pub holds the public key of what it holds is one.
    pub fn read(path: &Path) -> Result<PublicKey, SigningError> {
        let text = read_key_file(path)?;
        let beside = PathBuf::from(format!("{}.pub", path.display()));
        let secret_beside = read_key_file(&beside)
            .ok()
            .and_then(|beside| PublicKey::parse(&beside).ok())
            .zip(decode_hex::<32>(text.trim()))
            .is_some_and(|(beside, seed)| SecretKey(SigningKey::from_bytes(&seed)).public() == beside);
        if secret_beside {
            return Err(SigningError::SecretKeyGiven { path: path.to_path_buf() });
        }
        // Named by its file, not shown: it may be a secret all the same.
        PublicKey::parse(&text).map_err(|_| SigningError::BadKey(format!("the content of {}", path.display())))
    }

    /// The key in hex.
    pub fn to_hex(&self) -> String {
        encode_hex(self.0.as_bytes())
    }
}

impl std::fmt::Display for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// A secret signing key.
pub struct SecretKey(SigningKey);

impl SecretKey {
    /// A new random key.
    pub fn generate() -> Result<SecretKey, SigningError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| SigningError::Random(e.to_string()))?;
        Ok(SecretKey(SigningKey::from_bytes(&seed)))
    }

    /// Its public key.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    /// Reads a secret key file (64 hex digits). Refuses a `.pub` file: `keygen` writes
    /// the public key there, and signing with it as a secret would sign with a key nobody
    /// trusts.
    pub fn read(path: &Path) -> Result<SecretKey, SigningError> {
        if path.extension().is_some_and(|extension| extension == "pub") {
            return Err(SigningError::PublicKeyGiven { path: path.to_path_buf() });
        }
        let text = read_key_file(path)?;
        let seed: [u8; 32] = decode_hex(text.trim())
            .ok_or_else(|| SigningError::BadKey(format!("the content of {}", path.display())))?;
        Ok(SecretKey(SigningKey::from_bytes(&seed)))
    }

    /// Writes the secret key to `path` (a new file readable by its owner only) and the
    /// public key to `path.pub`; refuses to overwrite either.
    pub fn write(&self, path: &Path) -> Result<PathBuf, SigningError> {
        let public_path = PathBuf::from(format!("{}.pub", path.display()));
        write_new(path, &encode_hex(self.0.as_bytes()), true)?;
        write_new(&public_path, &self.public().to_hex(), false)?;
        Ok(public_path)
    }

    /// Signs a bundle's content.
    pub fn sign(&self, manifest: &[u8], module: &[u8]) -> Signature {
        let signature = self.0.sign(&content_hash(manifest, module));
        Signature { public_key: self.public().to_hex(), signature: encode_hex(&signature.to_bytes()) }
    }
}

/// How a bundle that passed [`verify`] is trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// Signed by this trusted key.
    Signed(PublicKey),
    /// Not signed; allowed explicitly.
    Unsigned,
}

/// Checks a bundle's signature: it must match the content (else [`SigningError::Tampered`])
/// and its key be among `trusted`; a bundle without one passes only with
/// `allow_unsigned`.
pub fn verify(
    manifest: &[u8],
    module: &[u8],
    signature: Option<&Signature>,
    trusted: &[PublicKey],
    allow_unsigned: bool,
) -> Result<Trust, SigningError> {
    let Some(signature) = signature else {
        return if allow_unsigned { Ok(Trust::Unsigned) } else { Err(SigningError::Unsigned) };
    };
    let key = PublicKey::parse(&signature.public_key)?;
    let bytes: [u8; 64] = decode_hex(&signature.signature).ok_or(SigningError::Tampered)?;
    let parsed = ed25519_dalek::Signature::from_bytes(&bytes);
    key.0.verify_strict(&content_hash(manifest, module), &parsed).map_err(|_| SigningError::Tampered)?;
    if !trusted.contains(&key) {
        return Err(SigningError::Untrusted(key.to_hex()));
    }
    Ok(Trust::Signed(key))
}

fn write_new(path: &Path, text: &str, secret: bool) -> Result<(), SigningError> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = secret;
    let error = |source| SigningError::KeyFile { action: "write", path: path.to_path_buf(), source };
    let mut file = options.open(path).map_err(error)?;
    file.write_all(format!("{text}\n").as_bytes()).map_err(error)
}

/// Lower-case hex of `bytes`.
pub fn encode_hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// The most bytes a key file may hold: a key is 64 hex digits and a newline.
const MAX_KEY_FILE: u64 = 4096;

/// The text of a key file, which must be a regular file (a pipe would be waited on for
/// ever, `/dev/zero` read for ever) of at most [`MAX_KEY_FILE`] bytes.
fn read_key_file(path: &Path) -> Result<String, SigningError> {
    use std::io::Read;
    let failed = |source| SigningError::KeyFile { action: "read", path: path.to_path_buf(), source };
    if !std::fs::metadata(path).map_err(failed)?.is_file() {
        return Err(SigningError::NotAKeyFile { path: path.to_path_buf() });
    }
    let mut text = String::new();
    std::fs::File::open(path).and_then(|file| file.take(MAX_KEY_FILE + 1).read_to_string(&mut text)).map_err(failed)?;
    if text.len() as u64 > MAX_KEY_FILE {
        return Err(SigningError::NotAKeyFile { path: path.to_path_buf() });
    }
    Ok(text)
}

/// Exactly `N` bytes from `2 * N` hex digits.
fn decode_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}
