//! The dashboard's files, embedded in the binary: data-transfer nodes are
//! often offline, so nothing is fetched at run time. The vendored
//! libraries (uPlot for time series, Cytoscape.js for the route graph,
//! topojson-client to read the world outline) and the outline itself
//! (Natural Earth's public-domain 1:110m land, as npm's world-atlas
//! packages it) come from npm unchanged; `assets/vendor/LICENSES.txt` has
//! their licences.

/// One embedded file.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    /// Its name under `/assets/`.
    pub name: &'static str,
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// Its bytes.
    pub bytes: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $type:literal) => {
        Asset {
            name: $name,
            content_type: $type,
            bytes: include_bytes!(concat!("../assets/", $name)),
        }
    };
}

/// The page itself, served at `/`.
pub const INDEX: Asset = asset!("index.html", "text/html; charset=utf-8");

/// Everything under `/assets/`.
pub const ASSETS: &[Asset] = &[
    asset!("app.js", "text/javascript; charset=utf-8"),
    asset!("app.css", "text/css; charset=utf-8"),
    asset!("vendor/uPlot.iife.min.js", "text/javascript; charset=utf-8"),
    asset!("vendor/uPlot.min.css", "text/css; charset=utf-8"),
    asset!("vendor/cytoscape.min.js", "text/javascript; charset=utf-8"),
    asset!(
        "vendor/topojson-client.min.js",
        "text/javascript; charset=utf-8"
    ),
    asset!("vendor/land-110m.json", "application/json"),
    asset!("vendor/LICENSES.txt", "text/plain; charset=utf-8"),
];

/// The asset called `name`, if there is one.
pub fn find(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}
