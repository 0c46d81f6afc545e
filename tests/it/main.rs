//! The root package's integration tests, in one binary (one link of the whole tree
//! instead of one per file): the `trellis` binary, its servers and its library driven as
//! users drive them, against real third-party MCP servers and clients, a real browser
//! and a real OpenAI-compatible server. Each module is one area; `common` holds what
//! they share.

#![allow(clippy::unwrap_used)] // a failing unwrap is a failing test

#[path = "../../plugins/tests/it/common/mod.rs"]
mod bundles;
mod common;
mod spaces;

mod answers;
mod app_tools;
mod approval;
mod chat_pty;
mod chatbot;
mod cli;
mod client_tools_cli;
mod cluster;
mod cluster_browser;
mod context;
mod counter;
mod dialog;
mod disk_full;
mod durable;
mod elicitation;
mod files;
mod graphs;
mod kill9;
mod llama;
mod mcp;
mod mcp_client;
mod mcp_remote;
mod mcp_signin;
mod mcp_tasks;
mod person_only;
mod plugin;
mod postgres;
mod preview;
mod reference_charms;
mod restart;
mod serve;
mod serve_approvals;
mod serve_browser;
mod serve_files;
mod serve_openapi;
mod serve_streams;
mod snapshot;
mod stale;
mod structured;
mod telemetry;
mod testing;
mod todo;
mod transactions;
mod undo;
mod watches;
