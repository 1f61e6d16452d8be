//! The trait a Rust plugin implements; [`crate::export_plugin!`] turns it into the C table.

use crate::call::Call;
use crate::context::{Context, PoolEvent};
use crate::error::PluginError;

/// An Active Data Object plugin. One value of the type is made at launch and lives in the
/// `ferrite-ado` host process until shutdown; every entry runs on one thread.
pub trait Plugin: Sized + 'static {
    /// Called once when the host loads the plugin. `config` is the plugin's configuration from
    /// the server (empty if none). An error refuses to start.
    fn launch(context: &Context<'_>, config: &[u8]) -> Result<Self, PluginError>;

    /// Handles one invocation. `Ok` commits every write the call declared (as one transaction,
    /// like a put); an error undoes them. Responses reach the client either way.
    fn do_work(&mut self, call: &mut Call<'_>) -> Result<(), PluginError>;

    /// Told of a pool event. Does nothing unless overridden.
    fn pool_event(&mut self, event: PoolEvent<'_>, context: &Context<'_>) {
        let _ = (event, context);
    }

    /// Called once before the host unloads the plugin; the value is dropped after.
    fn shutdown(self) {}
}
