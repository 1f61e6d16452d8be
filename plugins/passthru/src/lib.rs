//! `passthru`: a Ferrite plugin that does nothing and answers nothing, whatever the payload.
//! Invoking it measures what an invocation itself costs (the trip to the `ferrite-ado` host
//! and back, the key lock), next to a get on the same shard.

use ferrite_plugin::{Call, Context, Plugin, PluginError};

/// The plugin: no state.
#[derive(Debug)]
pub struct Passthru;

impl Plugin for Passthru {
    fn launch(_context: &Context<'_>, _config: &[u8]) -> Result<Passthru, PluginError> {
        Ok(Passthru)
    }

    fn do_work(&mut self, _call: &mut Call<'_>) -> Result<(), PluginError> {
        Ok(())
    }
}

ferrite_plugin::export_plugin!(Passthru, "passthru");

#[cfg(test)]
mod tests {
    use ferrite_plugin::testing::{InvokeOptions, TestHost};

    use super::*;

    /// An invocation succeeds, answers nothing and leaves the value as it was.
    #[test]
    fn answers_nothing_and_changes_nothing() {
        let mut host = TestHost::new(plugin_table(), b"").expect("passthru launches");
        host.put(b"k", b"value");
        let responses = host.invoke(b"k", b"anything at all", InvokeOptions::default()).expect("passthru succeeds");
        assert!(responses.is_empty());
        assert_eq!(host.get(b"k").as_deref(), Some(&b"value"[..]));
        assert!(host.undeclared_writes().is_empty());
    }

    /// The exported table names the plugin as the host will log it.
    #[test]
    fn table_names_the_plugin() {
        // SAFETY: the table's name is a NUL-terminated static string.
        #[allow(unsafe_code)]
        let name = unsafe { std::ffi::CStr::from_ptr(plugin_table().name) };
        assert_eq!(name.to_str(), Ok("passthru"));
    }
}
