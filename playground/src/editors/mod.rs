//! What the page's editors hold, read: YAML and JSON documents (`document`), the objects of
//! an editor by kind (`objects`), and the editor a problem belongs to (`field`).

pub mod document;
pub mod field;
pub mod objects;
