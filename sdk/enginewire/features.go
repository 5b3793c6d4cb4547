package enginewire

// Features a host announces at registration (RegisterResponse.features):
// what it does beyond the engine API's version 1. A client uses a feature
// only with a host that announced it, since an older host ignores the
// fields it does not know and would read them as absent.
const (
	// FeatureCommitFirstPage: CommitRequest.first_page, a commit of the
	// pages from first_page on whose earlier pages the request matched or
	// committed before. Without it page_slots start at the root.
	FeatureCommitFirstPage = "commit_first_page"
	// FeatureCommitParts: RegisterRequest.parts, AllocateRequest.part and
	// CommitRequest.part, pages written in slices by several processes
	// (tensor-parallel ranks) and committed once all of them wrote theirs.
	FeatureCommitParts = "commit_parts"
)

// HostFeatures are the features this version of the host announces.
var HostFeatures = []string{FeatureCommitFirstPage, FeatureCommitParts}
