//! The HTTP client a Streamable HTTP server is reached with: rmcp's reqwest, on rustls
//! with ring (the crypto the rest of Trellis uses) and the system's trust roots, plus a
//! server's own CA (`"ca"` in the file, `--mcp-ca`). It follows no redirect, so a token in
//! a header never goes to another origin; and plain `http://` reaches only this machine,
//! unless the server's entry says `"insecure": true`.

use std::net::IpAddr;
use std::path::Path;

/// Whether `url` may be reached: `https://` anywhere; `http://` to a loopback host, or
/// anywhere when `insecure`.
pub(super) fn check_url(url: &str, insecure: bool) -> Result<(), String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("`{url}` is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("https") => Ok(()),
        Some("http") if insecure || uri.host().is_some_and(is_loopback) => Ok(()),
        Some("http") => Err(format!(
            "`{url}` is plain http to another machine, where anyone on the way reads the requests (and any token); \
             use https://, or set \"insecure\": true in its entry if you mean it"
        )),
        _ => Err(format!("`{url}` is not an http:// or https:// URL")),
    }
}

fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The client for one server, trusting `ca` (PEM, one or more certificates) besides the
/// system's roots.
pub(super) fn client(ca: Option<&Path>) -> Result<reqwest_mcp::Client, String> {
    // reqwest is built without a crypto provider of its own: ring, installed once for the
    // process (an embedding program's own choice, installed earlier, stands).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder =
        reqwest_mcp::Client::builder().tls_backend_rustls().redirect(reqwest_mcp::redirect::Policy::none());
    if let Some(ca) = ca {
        let pem = std::fs::read(ca).map_err(|e| format!("cannot read the CA certificate {}: {e}", ca.display()))?;
        let certificates = reqwest_mcp::Certificate::from_pem_bundle(&pem)
            .map_err(|e| format!("{} holds no PEM certificate: {e}", ca.display()))?;
        if certificates.is_empty() {
            return Err(format!("{} holds no PEM certificate", ca.display()));
        }
        for certificate in certificates {
            builder = builder.add_root_certificate(certificate);
        }
    }
    builder.build().map_err(|e| format!("cannot set up HTTPS: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_reaches_only_this_machine_unless_insecure() {
        assert!(check_url("https://mcp.example.com/mcp", false).is_ok());
        assert!(check_url("http://127.0.0.1:8000/mcp", false).is_ok());
        assert!(check_url("http://localhost/mcp", false).is_ok());
        assert!(check_url("http://[::1]:9/mcp", false).is_ok());
        let refused = check_url("http://mcp.example.com/mcp", false).expect_err("plain http elsewhere");
        assert!(refused.contains("\"insecure\": true"), "{refused}");
        assert!(check_url("http://mcp.example.com/mcp", true).is_ok());
        assert!(check_url("ftp://x/mcp", true).is_err());
    }
}
