//! What ends a process, in one place: its signals and the drain that follows.
//!
//! SIGTERM drains gracefully. SIGQUIT, on a process with redirect listeners, hands them to
//! a new process (Pingora's upgrade) and then drains; elsewhere it keeps its default
//! action. SIGINT exits at once (130). SIGHUP reloads the TLS certificate
//! (`rebound_edge::tls::watch_certificate`); without TLS it is only logged.

use rebound_proxy::server::Shutdown;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Resolves when the process is asked to stop: SIGTERM drains; with `hand_over`, SIGQUIT
/// hands the listeners over. SIGINT exits the process at once.
pub async fn stop_requested(hand_over: bool) -> Shutdown {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::error!("cannot listen for signals");
        return std::future::pending().await;
    };
    let mut quit = match hand_over {
        true => match signal(SignalKind::quit()) {
            Ok(quit) => Some(quit),
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGQUIT: no upgrades");
                None
            }
        },
        false => None,
    };
    let quit = async {
        match &mut quit {
            Some(quit) => quit.recv().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = term.recv() => {
            tracing::info!("SIGTERM: draining");
            Shutdown::Drain
        }
        _ = quit => {
            tracing::info!("SIGQUIT: handing the listeners to the new process, then draining");
            Shutdown::HandOver
        }
        _ = int.recv() => {
            tracing::info!("SIGINT: exiting now");
            std::process::exit(130);
        }
    }
}

/// Without a TLS certificate SIGHUP has nothing to reload: it is logged instead of ending
/// the process (its default action), until `stop`.
pub async fn log_hangups(mut stop: watch::Receiver<bool>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangup) = signal(SignalKind::hangup()) else {
        return;
    };
    loop {
        tokio::select! {
            _ = hangup.recv() => tracing::info!("SIGHUP: no TLS certificate to reload"),
            _ = stop.changed() => return,
        }
    }
}

/// Waits for tasks to finish, at most `limit`.
pub async fn drain(tasks: Vec<JoinHandle<()>>, limit: Duration) {
    let all = async {
        for t in tasks {
            let _ = t.await;
        }
    };
    if tokio::time::timeout(limit, all).await.is_err() {
        tracing::warn!("drain took too long; exiting");
    }
}
