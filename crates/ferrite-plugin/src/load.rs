//! Loading a plugin library: the host's side of the ABI handshake. The library is opened, its
//! `ferrite_plugin_entry` called, and its table checked (ABI version, table size, name) before
//! anything else of it runs.

use std::ffi::CStr;
use std::path::{Path, PathBuf};

use crate::abi::{EntryFn, PluginV1, ABI_VERSION, ENTRY_SYMBOL};

/// Why a plugin library was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    #[error("cannot load plugin library {path}: {reason}")]
    Open { path: PathBuf, reason: String },
    #[error("plugin library {path} exports no `ferrite_plugin_entry` ({reason}); is it a Ferrite plugin?")]
    NoEntry { path: PathBuf, reason: String },
    #[error("plugin library {path}: `ferrite_plugin_entry` returned no table")]
    NoTable { path: PathBuf },
    #[error("plugin library {path} is built for plugin ABI version {found}; this host speaks version {ABI_VERSION}")]
    AbiVersion { path: PathBuf, found: u32 },
    #[error("plugin library {path}: its table is {found} bytes, smaller than version {ABI_VERSION}'s {needed}")]
    TableSize { path: PathBuf, found: u32, needed: u32 },
    #[error("plugin library {path}: its name is not valid UTF-8 text")]
    Name { path: PathBuf },
}

/// A loaded plugin library and its checked table. The table points into the library, so the
/// library stays loaded for as long as this value lives.
#[derive(Debug)]
pub struct LoadedPlugin {
    table: &'static PluginV1,
    name: String,
    path: PathBuf,
    _library: libloading::Library,
}

impl LoadedPlugin {
    /// Opens the library at `path` and checks its table.
    ///
    /// Loading runs the library's initialisers, and its table is trusted to describe its entry
    /// points: only libraries the operator configured are loaded, and only inside the
    /// `ferrite-ado` host process, which the server can kill and restart.
    #[allow(unsafe_code)]
    pub fn open(path: &Path) -> Result<LoadedPlugin, LoadError> {
        let path_buf = path.to_path_buf();
        // SAFETY: loading a library runs its initialisers, which is what loading a plugin means;
        // the operator chose the library (see above).
        let library = unsafe { libloading::Library::new(path) }
            .map_err(|e| LoadError::Open { path: path_buf.clone(), reason: e.to_string() })?;
        // SAFETY: the symbol is declared by the header with exactly this type.
        let entry = unsafe { library.get::<EntryFn>(ENTRY_SYMBOL) }
            .map_err(|e| LoadError::NoEntry { path: path_buf.clone(), reason: e.to_string() })?;
        // SAFETY: calling the entry point the header declares; it takes no arguments.
        let table = unsafe { entry() };
        // SAFETY: a non-null table points to the plugin's static table, alive while the library
        // is loaded, which `_library` guarantees for the life of the returned value. The version
        // and size fields come first in every version of the table, so reading them is sound
        // whatever the plugin's version.
        let table: &'static PluginV1 = match unsafe { table.as_ref() } {
            Some(table) => table,
            None => return Err(LoadError::NoTable { path: path_buf }),
        };
        if table.abi_version != ABI_VERSION {
            return Err(LoadError::AbiVersion { path: path_buf, found: table.abi_version });
        }
        let needed = std::mem::size_of::<PluginV1>() as u32;
        if table.struct_size < needed {
            return Err(LoadError::TableSize { path: path_buf, found: table.struct_size, needed });
        }
        if table.name.is_null() {
            return Err(LoadError::Name { path: path_buf });
        }
        // SAFETY: a non-null name is a NUL-terminated string in the plugin's static memory.
        let name =
            unsafe { CStr::from_ptr(table.name) }.to_str().map_err(|_| LoadError::Name { path: path_buf.clone() })?;
        Ok(LoadedPlugin { table, name: name.to_owned(), path: path_buf, _library: library })
    }

    /// The plugin's checked entry table.
    pub fn table(&self) -> &PluginV1 {
        self.table
    }

    /// The name the plugin gives itself.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}
