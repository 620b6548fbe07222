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

/// Listens, from this call on, for what asks the process to stop, and resolves when it is
/// asked: SIGTERM drains; with `hand_over`, SIGQUIT hands the listeners over. SIGINT exits
/// the process at once. The handlers are installed here, not at the first poll: a process
/// polls it only once its redirect server runs, and a SIGTERM before that (an orchestrator
/// stopping a process it just started) would otherwise take the signal's default action and
/// end the process without its drain. Call it before announcing the listeners, on a thread
/// inside `runtime` (its reactor receives the signals).
pub fn stop_requested(
    hand_over: bool,
    runtime: &tokio::runtime::Handle,
) -> impl std::future::Future<Output = Shutdown> + Send + 'static {
    use tokio::signal::unix::{signal, SignalKind};
    let _inside = runtime.enter();
    let listening = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()));
    let quit = match hand_over {
        true => match signal(SignalKind::quit()) {
            Ok(quit) => Some(quit),
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGQUIT: no upgrades");
                None
            }
        },
        false => None,
    };
    async move {
        let (Ok(mut term), Ok(mut int)) = listening else {
            tracing::error!("cannot listen for signals");
            return std::future::pending().await;
        };
        let mut quit = quit;
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
