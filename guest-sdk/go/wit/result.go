package wit

// Result is a WIT result: Ok when IsErr is false, Err otherwise.
type Result[T, E any] struct {
	Ok    T
	Err   E
	IsErr bool
}
