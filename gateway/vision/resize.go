package vision

import "math"

// Pillow's resampling keeps 8-bit intermediates: a horizontal pass, rounded
// and clipped to bytes, then a vertical pass. Coefficients are fixed point
// with 22 fractional bits. Matching that exactly makes our patches equal to
// the reference processor's, not merely close.
const precisionBits = 32 - 8 - 2

func bicubic(x float64) float64 {
	const a = -0.5
	if x < 0 {
		x = -x
	}
	if x < 1 {
		return ((a+2)*x-(a+3))*x*x + 1
	}
	if x < 2 {
		return (((x-5)*x+8)*x - 4) * a
	}
	return 0
}

// coeffs computes, for each output position, the first input index and the
// fixed-point weights of the input pixels that contribute to it.
func coeffs(inSize, outSize int) (bounds []int, kk [][]int32) {
	scale := float64(inSize) / float64(outSize)
	filterscale := math.Max(scale, 1)
	support := 2.0 * filterscale
	bounds = make([]int, outSize)
	kk = make([][]int32, outSize)
	pre := make([]float64, int(math.Ceil(support))*2+1)
	for xx := 0; xx < outSize; xx++ {
		center := (float64(xx) + 0.5) * scale
		ss := 1.0 / filterscale
		xmin := int(center - support + 0.5)
		if xmin < 0 {
			xmin = 0
		}
		xmax := int(center + support + 0.5)
		if xmax > inSize {
			xmax = inSize
		}
		xmax -= xmin
		ww := 0.0
		for x := 0; x < xmax; x++ {
			w := bicubic((float64(x+xmin) - center + 0.5) * ss)
			pre[x] = w
			ww += w
		}
		k := make([]int32, xmax)
		for x := 0; x < xmax; x++ {
			v := pre[x]
			if ww != 0 {
				v /= ww
			}
			if v < 0 {
				k[x] = int32(v*(1<<precisionBits) - 0.5)
			} else {
				k[x] = int32(v*(1<<precisionBits) + 0.5)
			}
		}
		bounds[xx] = xmin
		kk[xx] = k
	}
	return bounds, kk
}

func clip8(v int64) byte {
	v >>= precisionBits
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return byte(v)
}

// Resize scales an RGB raster to w×h with Pillow's BICUBIC filter.
func Resize(src *RGB, w, h int) *RGB {
	cur := src
	if w != cur.W {
		bounds, kk := coeffs(cur.W, w)
		out := &RGB{W: w, H: cur.H, Pix: make([]byte, w*cur.H*3)}
		for y := 0; y < cur.H; y++ {
			row := cur.Pix[y*cur.W*3:]
			for xx := 0; xx < w; xx++ {
				k, xmin := kk[xx], bounds[xx]
				for c := 0; c < 3; c++ {
					ss := int64(1) << (precisionBits - 1)
					for x, kv := range k {
						ss += int64(row[(x+xmin)*3+c]) * int64(kv)
					}
					out.Pix[(y*w+xx)*3+c] = clip8(ss)
				}
			}
		}
		cur = out
	}
	if h != cur.H {
		bounds, kk := coeffs(cur.H, h)
		out := &RGB{W: cur.W, H: h, Pix: make([]byte, cur.W*h*3)}
		stride := cur.W * 3
		for yy := 0; yy < h; yy++ {
			k, ymin := kk[yy], bounds[yy]
			for i := 0; i < stride; i++ {
				ss := int64(1) << (precisionBits - 1)
				for y, kv := range k {
					ss += int64(cur.Pix[(y+ymin)*stride+i]) * int64(kv)
				}
				out.Pix[yy*stride+i] = clip8(ss)
			}
		}
		cur = out
	}
	if cur == src {
		cp := *src
		cp.Pix = append([]byte(nil), src.Pix...)
		return &cp
	}
	return cur
}
