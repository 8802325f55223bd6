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
func coeffs(inSize, outSize int, int16Weights bool) (bounds []int, kk [][]int32, prec uint) {
	scale := float64(inSize) / float64(outSize)
	filterscale := math.Max(scale, 1)
	support := 2.0 * filterscale
	bounds = make([]int, outSize)
	kk = make([][]int32, outSize)
	pre := make([]float64, int(math.Ceil(support))*2+1)
	norm := make([][]float64, outSize)
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
		n := make([]float64, xmax)
		for x := 0; x < xmax; x++ {
			n[x] = pre[x]
			if ww != 0 {
				n[x] /= ww
			}
		}
		bounds[xx], norm[xx] = xmin, n
	}
	prec = precisionBits
	if int16Weights {
		// torch's uint8 kernel (after Pillow-SIMD) keeps weights in int16:
		// the most precision for which the largest weight still fits.
		wmax := 0.0
		for _, n := range norm {
			for _, v := range n {
				wmax = math.Max(wmax, v)
			}
		}
		for prec = 0; prec < 22; prec++ {
			if int(0.5+wmax*float64(int64(1)<<(prec+1))) >= 1<<15 {
				break
			}
		}
	}
	for xx, n := range norm {
		k := make([]int32, len(n))
		for x, v := range n {
			if v < 0 {
				k[x] = int32(v*float64(int64(1)<<prec) - 0.5)
			} else {
				k[x] = int32(v*float64(int64(1)<<prec) + 0.5)
			}
		}
		kk[xx] = k
	}
	return bounds, kk, prec
}

func clip8(v int64, prec uint) byte {
	v >>= prec
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return byte(v)
}

// Resize scales an RGB raster to w×h with Pillow's BICUBIC filter.
func Resize(src *RGB, w, h int) *RGB { return resizeFixed(src, w, h, false) }

// ResizeTorch scales like torch's uint8 antialiased bicubic kernel, which
// transformers' Qwen-VL processors (5.x, through torchvision) use: Pillow's
// algorithm with int16 weights.
func ResizeTorch(src *RGB, w, h int) *RGB { return resizeFixed(src, w, h, true) }

func resizeFixed(src *RGB, w, h int, int16Weights bool) *RGB {
	cur := src
	if w != cur.W {
		bounds, kk, prec := coeffs(cur.W, w, int16Weights)
		out := &RGB{W: w, H: cur.H, Pix: make([]byte, w*cur.H*3)}
		for y := 0; y < cur.H; y++ {
			row := cur.Pix[y*cur.W*3:]
			for xx := 0; xx < w; xx++ {
				k, xmin := kk[xx], bounds[xx]
				for c := 0; c < 3; c++ {
					ss := int64(1) << (prec - 1)
					for x, kv := range k {
						ss += int64(row[(x+xmin)*3+c]) * int64(kv)
					}
					out.Pix[(y*w+xx)*3+c] = clip8(ss, prec)
				}
			}
		}
		cur = out
	}
	if h != cur.H {
		bounds, kk, prec := coeffs(cur.H, h, int16Weights)
		out := &RGB{W: cur.W, H: h, Pix: make([]byte, cur.W*h*3)}
		stride := cur.W * 3
		for yy := 0; yy < h; yy++ {
			k, ymin := kk[yy], bounds[yy]
			for i := 0; i < stride; i++ {
				ss := int64(1) << (prec - 1)
				for y, kv := range k {
					ss += int64(cur.Pix[(y+ymin)*stride+i]) * int64(kv)
				}
				out.Pix[yy*stride+i] = clip8(ss, prec)
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
