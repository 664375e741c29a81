package pagestore

// Where a page-store file identifies itself, for tools that must tell it
// from other database files (package schema's format detection) without
// opening it: page 0 is a meta page holding Magic at MagicOffset and the
// page size (u32, little-endian) at PageSizeOffset. Wire format, never
// change.
const (
	Magic          = magic
	MagicOffset    = metaOffMagic
	PageSizeOffset = metaOffPageSize
)
