package rewrite

// defaultBlob returns the runtime blob used when Options.Blob is nil.
func defaultBlob() ([]byte, error) {
	return nil, errBlob("package runtime does not provide a blob yet; set Options.Blob")
}
